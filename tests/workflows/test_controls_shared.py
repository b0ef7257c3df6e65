"""The shared pieces of workflows/controls/: the outbox of notices and the approval helper (no server)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from common.types import TERMINAL, Notification
from tests.workflows.controlled import ControlledStub
from workflows import options
from workflows.controls import Approval, AuditEntry, Controls, Hold, Outbox

T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)




@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """Every activity the outbox schedules, in the order it was scheduled: (how, activity, argument, options)."""
    seen: list[tuple[str, Any, Any, dict[str, Any]]] = []

    async def execute(fn: Any, arg: Any, **kw: Any) -> bool:
        seen.append(("execute", fn, arg, kw))
        if arg.event == "boom":
            raise RuntimeError("webhook down")
        return True

    async def done() -> bool:
        return True

    def start(fn: Any, arg: Any, **kw: Any) -> asyncio.Future[bool]:
        seen.append(("start", fn, arg, kw))
        return asyncio.ensure_future(done())

    monkeypatch.setattr(workflow, "execute_activity_method", execute)
    monkeypatch.setattr(workflow, "start_activity_method", start)
    return seen


def _notice(event: str) -> Notification:
    return Notification(rollout_id="rollout/pay/2", service="pay", version="2", event=event, text="t")


async def test_a_notice_is_the_one_notify_call_scheduled_when_the_workflow_yields(calls: list[Any]) -> None:
    from activities.notify import NotifyActivities

    box = Outbox()
    box.send(_notice("rollout_started"))
    assert calls == []  # not yet: the rollout's commands that follow in this task come first, as recorded
    await asyncio.sleep(0)
    assert [(how, fn, arg.event, kw) for how, fn, arg, kw in calls] == [
        ("execute", NotifyActivities.notify, "rollout_started", {"summary": "notify rollout_started", **options.NOTIFY})]
    assert box.in_flight == 0
    await box.flush()


async def test_an_at_once_outbox_schedules_the_notice_when_it_is_sent(calls: list[Any]) -> None:
    box = Outbox(at_once=True, about={"rollout_id": "guard/pay", "service": "pay", "version": "region guard"}, cut=5)
    box.tell("guard_started", "watching pay (prod)", stage="eu-west-1")
    assert len(calls) == 1  # the guard's order: before anything else of this task
    how, _, n, kw = calls[0]
    assert (how, kw["summary"]) == ("start", "notify guard_started")
    assert n == Notification(rollout_id="guard/pay", service="pay", version="region guard", event="guard_started",
                             text="watch", stage="eu-west-1")
    await box.flush()


async def test_flush_waits_for_every_send_ignores_failures_and_leaves_watchers_running(calls: list[Any]) -> None:
    box = Outbox()
    box.send(_notice("boom"))
    signalled = asyncio.Event()

    async def signal() -> None:
        await asyncio.sleep(0.01)
        signalled.set()

    box.add(signal())
    never = asyncio.Event()
    box.watch(never.wait())
    assert box.in_flight == 2
    await asyncio.wait_for(box.flush(), 2)  # the watcher never ends, and flush does not wait for it
    assert signalled.is_set() and box.in_flight == 0 and len(calls) == 1
    box.send(_notice("again"))
    await box.flush()
    assert [c[2].event for c in calls] == ["boom", "again"]


async def test_prune_keeps_only_what_is_in_flight(calls: list[Any]) -> None:
    box = Outbox(at_once=True)
    box.send(_notice("a"))
    await asyncio.sleep(0)
    gate = asyncio.Event()
    box.add(gate.wait())
    box.prune()
    assert len(box._pending) == 1
    gate.set()
    await box.flush()


# -- the approval helper ---------------------------------------------------------------------------------------
def _approval(approvers: list[str], **kw: Any) -> Approval:
    controls: Controls[str] = Controls(ControlledStub(), noun="rollout", terminal=TERMINAL, **kw)
    return Approval(controls, approvers, source="approvals.approvers in the request")


def test_only_a_listed_approver_may_decide_and_the_refusal_names_the_field_not_the_list() -> None:
    approval = _approval(["alice", "bob"])
    approval.check("alice")
    approval.check("bob", field="by")
    with pytest.raises(ApplicationError) as info:
        approval.check("mallory\n", field="by")
    assert info.value.message == ("by: 'mallory\\\\n' may not approve or decide here: the name is not on the list of "
                               "approvers (approvals.approvers in the request)")
    assert info.value.type == "Refused" and "alice" not in str(info.value)
    _approval([]).check("anyone")  # an empty list: anyone who may send updates


def test_a_decision_hold_says_who_may_decide_and_when_it_times_out_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate says who must act and when it times out (and into what), in UTC whatever zone the time came in:
    the line is published once and read later, so never relative."""
    monkeypatch.setattr(workflow, "now", lambda: T0)
    approval = _approval(["alice", "bob"])
    ahead = timezone(timedelta(hours=5, minutes=30))
    hold = approval.hold("approval", releases="approval of wave 4 (gates: us-east-1/prod)",
                         until=datetime(2026, 3, 29, 7, 30, 5, tzinfo=ahead), then="the rollout is rejected")
    assert hold.waiting_for == ("approval of wave 4 (gates: us-east-1/prod); may decide: alice, bob; "
                                "times out at 2026-03-29 02:00:05 UTC, then the rollout is rejected")
    anyone = _approval([]).hold("approval", releases="approve before anything changes")
    assert anyone.waiting_for == "approve before anything changes; may decide: anyone who may send updates"
    assert Hold.model_validate(hold.model_dump(mode="json")).waiting_for == hold.waiting_for  # through a payload


def test_a_stopping_workflow_refuses_a_decision_before_the_name_is_looked_at() -> None:
    approval = _approval(["alice"], stop_word=lambda s: s)
    approval.controls.halt("aborted")
    with pytest.raises(ApplicationError, match="the rollout is already aborted; nothing to do"):
        approval.check("mallory")
    with pytest.raises(ApplicationError, match="'mallory' may not approve"):
        approval.check_who("mallory")  # the name alone, for a validator that checks its state in between


def test_a_decision_is_recorded_in_the_audit_and_releases_the_hold_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workflow, "now", lambda: T0)
    approval = _approval(["alice"])
    state = approval.controls.state
    approval.controls.hold("approval", releases="approval of wave 2", wave=2)
    assert state.status == "awaiting_approval"
    released = approval.decided("alice", "approve", "wave-2", "ok", release="approval")
    assert released is not None and released.wave == 2
    assert state.holds == [] and state.status == "running"
    assert state.audit == [AuditEntry(at=T0, who="alice", action="approve", target="wave-2", detail="ok")]
    assert approval.decided("alice", "approve", None, "go") is None  # no hold to release: only the audit line
    assert [a.detail for a in state.audit] == ["ok", "go"]


# -- the shared pieces of the UI's pages -------------------------------------------------------------------------
def test_the_shared_page_pieces_render_as_the_rollout_and_evacuation_pages_did() -> None:
    from workflows.controls.details import GAP, WHO, audit_line, link, row, when
    from workflows.evacuation import details as evacuation_details
    from workflows.stage import details as stage_details

    assert stage_details.link is link and evacuation_details.link is link and evacuation_details.WHO == WHO
    assert WHO == "<your name>" and GAP == "\u2003"
    assert row(["a", "b"]) == "| a\u2003 | b\u2003 |"
    assert (when(T0), when(None)) == ("2026-12-01 09:30 UTC", "?")
    assert link("report", "https://r.example/a.html") == "[report](https://r.example/a.html)"
    assert link("report", "/tmp/r`x.html") == "report (`/tmp/r'x.html`)"  # a worker-local path: not a link
    assert link("report", "javascript:alert(1)").startswith("report (`")
    assert audit_line(AuditEntry(at=T0, who="al", action="approve", target="wave-4", detail="ok")) == \
        "12-01 09:30 al: approve wave-4 — ok"
    assert audit_line(AuditEntry(at=T0, who="al", action="pause")) == "12-01 09:30 al: pause"
