"""Temporal connection from the environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TLS, API key, profiles)."""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfig

from worker.converter import DATA_CONVERTER

DEFAULT_ADDRESS = "localhost:7233"
TASK_QUEUE = "bifrost"


def connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """Keyword arguments for `Client.connect`, from the Temporal CLI's env vars and config file."""
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    if not config.get("api_key"):  # an empty TEMPORAL_API_KEY must not switch TLS on for a plaintext server
        config.pop("api_key", None)
        if config.get("tls") is True and not os.environ.get("TEMPORAL_TLS"):
            config.pop("tls", None)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    return config


async def connect(address: str | None = None, namespace: str | None = None, **extra: Any) -> Client:
    """Connect with the pydantic data converter every Bifrost client and worker must share.

    `extra` goes to `Client.connect` too: a `runtime` serving metrics, tracing `interceptors` (worker/telemetry.py)."""
    return await Client.connect(**connect_config(address, namespace), data_converter=DATA_CONVERTER, **extra)
