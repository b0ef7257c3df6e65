"""The worker's render pool: drawing runs in other processes at a lower priority, and survives a killed process."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool

import pytest

from worker.build import RenderPool


@pytest.fixture
def pool() -> Iterator[RenderPool]:
    p = RenderPool(1)
    yield p
    p.shutdown()


@pytest.mark.process
def test_renders_run_in_another_process_at_a_lower_priority(pool: RenderPool):
    assert pool.submit(os.getpid).result(60) != os.getpid()
    assert pool.submit(os.nice, 0).result(60) == min(19, os.nice(0) + 10)


@pytest.mark.process
def test_a_killed_render_process_fails_its_render_and_the_next_one_gets_a_new_pool(pool: RenderPool):
    child = pool.submit(os.getpid).result(60)
    doomed = pool.submit(os.kill, child, signal.SIGKILL)  # as the kernel's OOM killer would
    with pytest.raises(BrokenProcessPool):
        doomed.result(60)
    fresh = pool.submit(os.getpid).result(60)  # Temporal retries the render; the pool must draw again
    assert fresh not in (child, os.getpid())
    with pytest.raises(ValueError, match="at least 1"):
        RenderPool(0)
