"""An adapter's API client, made on its first use and kept.

Made inside an activity, never at worker start: that is when its secrets are read (activities/adapters/secrets.py),
so a worker starts without them and a missing one fails the call that needs it. A client that cannot be made (a
missing secret, a bad kubeconfig, an unknown AWS profile) is a non-retryable error of the adapter's own kind that
names the client and says where to look.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from activities.adapters.base import AdapterError
from activities.adapters.secrets import SecretError

C = TypeVar("C")


class LazyClient(Generic[C]):
    """`get()` returns the one client `factory` makes, made on first use; failures become `error` (non-retryable)."""

    def __init__(self, factory: Callable[[], C], service: str, *, error: type[AdapterError], hint: str,
                 catch: tuple[type[Exception], ...] = (Exception,)) -> None:
        self._factory = factory
        self.service = service  # in words, for the message: "Route 53", "elbv2", "Kubernetes"
        self._error, self._hint, self._catch = error, hint, catch
        self._client: C | None = None
        self._lock = threading.Lock()  # one client, even when calls in threads ask for it at once

    def get(self) -> C:
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._factory()
                except SecretError as err:
                    raise self._error(str(err), retryable=False) from err
                except self._catch as err:  # kubeconfig parse errors, unknown profile, bad endpoint URL, ...
                    raise self._error(f"could not create a {self.service} client", status=type(err).__name__,
                                      detail=str(err), hint=self._hint, retryable=False) from err
            return self._client
