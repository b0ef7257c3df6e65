"""The test kinds of tests/conftest.py: a `unit` test cannot start a process, so `make test-fast` needs no server."""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess

import pytest

from tests.conftest import SpawnedInUnitTest


def test_this_test_is_a_unit_test(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None
    assert not any(request.node.get_closest_marker(kind) for kind in ("server", "process", "ui"))


def test_a_unit_test_cannot_start_a_subprocess() -> None:
    with pytest.raises(SpawnedInUnitTest, match="marked unit but started a process"):
        subprocess.run(["true"], check=True)


async def test_a_unit_test_cannot_start_an_asyncio_subprocess() -> None:
    with pytest.raises(SpawnedInUnitTest):
        await asyncio.create_subprocess_exec("true")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_unit_test_cannot_start_a_multiprocessing_process(method: str) -> None:
    """Also covers a bare os.fork, which the "fork" method calls (calling it here would fork pytest if the guard broke)."""
    with pytest.raises(SpawnedInUnitTest):
        multiprocessing.get_context(method).Process(target=print).start()


def test_every_collected_test_using_a_dev_server_is_a_server_test_and_no_unit_test_is_another_kind(
        request: pytest.FixtureRequest) -> None:
    """The kinds come from item.fixturenames, the closure: a fixture that uses `env` makes its tests `server`."""
    for item in request.session.items:
        marks = {m.name for m in item.iter_markers()}
        uses_server = bool({"env", "ts_env", "ui_server"} & set(getattr(item, "fixturenames", ())))
        assert ("server" in marks) >= uses_server, item.nodeid
        assert not ("unit" in marks and ({"server", "process", "ui"} & marks)), item.nodeid
