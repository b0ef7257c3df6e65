"""Peer queries: concurrent askers of one workflow's query share a query started after each of them asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment

from activities.peers import PeerActivities, PeerQuery
from common.failures import WORKER_SHUTTING_DOWN


class _Workflow:
    """A queried workflow whose answers the test releases one at a time; each query answers the state it saw when
    it started (as a real query does)."""

    def __init__(self) -> None:
        self.state = "old"
        self.started: list[str] = []
        self.release = asyncio.Queue[None]()

    async def query(self, name: str, **_: Any) -> str:
        seen = self.state
        self.started.append(seen)
        await self.release.get()
        return seen


class _Client:
    def __init__(self, wf: _Workflow) -> None:
        self.wf = wf

    def get_workflow_handle(self, workflow_id: str) -> _Workflow:
        if workflow_id != "rollout/x":
            raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
        return self.wf


async def _until(cond: Any) -> None:
    async with asyncio.timeout(5):
        while not cond():
            await asyncio.sleep(0)


async def test_askers_during_a_query_share_the_next_one_which_answers_what_they_asked_after() -> None:
    wf = _Workflow()
    peers = PeerActivities(_Client(wf))  # type: ignore[arg-type]
    ask = PeerQuery(workflow_id="rollout/x", query="orders")
    first = asyncio.create_task(peers.query_workflow(ask))
    await _until(lambda: len(wf.started) == 1)
    wf.state = "new"  # the rollout records an order, then signals five stages: each asks
    later = [asyncio.create_task(peers.query_workflow(ask)) for _ in range(5)]
    await asyncio.sleep(0)
    assert len(wf.started) == 1  # one query to a workflow at a time: the five wait for the one in flight
    wf.release.put_nowait(None)
    assert (await first).answer == "old"
    await _until(lambda: len(wf.started) == 2)
    wf.release.put_nowait(None)
    answers = await asyncio.gather(*later)
    assert [a.answer for a in answers] == ["new"] * 5  # never the answer of a query started before they asked
    assert wf.started == ["old", "new"]  # six askers, two queries


async def test_an_asker_cancelled_leaves_the_shared_query_to_the_others() -> None:
    wf = _Workflow()
    peers = PeerActivities(_Client(wf))  # type: ignore[arg-type]
    ask = PeerQuery(workflow_id="rollout/x", query="orders")
    a, b = (asyncio.create_task(peers.query_workflow(ask)) for _ in range(2))
    await _until(lambda: len(wf.started) == 1)
    a.cancel()
    wf.release.put_nowait(None)
    assert (await b).answer == "old"
    assert a.cancelled()


async def test_a_missing_workflow_is_not_found_and_leaves_nothing_behind() -> None:
    peers = PeerActivities(_Client(_Workflow()))  # type: ignore[arg-type]
    answer = await peers.query_workflow(PeerQuery(workflow_id="rollout/gone", query="orders"))
    assert answer.found is False
    assert not peers._flying and not peers._next


async def test_a_query_in_flight_when_its_worker_stops_fails_that_attempt_at_once_and_the_others_still_get_the_answer() -> None:
    """A stopping worker polls no workflow task, so with no other worker a query it sent is never answered: the
    attempt used to wait for the 30 s RPC timeout and hold the worker's graceful shutdown as long (the lock
    confirming the release of a rollout that had just ended, when the benchmark left its worker)."""
    wf = _Workflow()  # answers nothing until released: a query no worker picks up
    peers = PeerActivities(_Client(wf))  # type: ignore[arg-type]
    ask = PeerQuery(workflow_id="rollout/x", query="__bifrost_lock_claim")
    stopping, staying = ActivityEnvironment(), ActivityEnvironment()  # this worker, and another one asking the same
    attempt = asyncio.ensure_future(stopping.run(peers.query_workflow, ask))
    other = asyncio.ensure_future(staying.run(peers.query_workflow, ask))
    await _until(lambda: len(wf.started) == 1)
    stopping.worker_shutdown()
    async with asyncio.timeout(10):  # only turns a hang into a failure: the attempt ends without the query answering
        with pytest.raises(ApplicationError) as err:
            await attempt
    assert err.value.type == WORKER_SHUTTING_DOWN and not err.value.non_retryable  # the next attempt asks again
    # expected whenever a worker stops mid-query: the SDK logs a benign failure at DEBUG, without a WARN traceback
    assert err.value.category == ApplicationErrorCategory.BENIGN
    assert wf.started == ["old"] and not other.done()  # the shared query goes on for the asker still running
    wf.release.put_nowait(None)
    assert (await other).answer == "old"
    assert not peers._flying and not peers._next
