"""Every approver check in one place (#29): workflows/controls.check_approver refuses a name outside a workflow's
approvers with one message naming the field and the allowed names. Each deciding update calls it: the rollout's
approve, reject, skip_soak, override_window and resolve_hold (tests/workflows/test_controls.py, test_hold.py,
test_internal_signals.py), the evacuation's approve (test_evacuation.py), and the region guard's approve and
dismiss (here: a dismiss by anyone used to drop the proposal to evacuate a sick region, which was then proposed
and notified again at every look)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from common.types import REFUSED, Notification
from tests.workflows.evacuation_helpers import running_worker, service
from tests.workflows.test_guard import fleet_with, guard_input, start, stop, update, wait_for
from workflows.controls import check_approver
from workflows.guard.models import ApproveGuard, DismissGuard
from workflows.guard.workflow import RegionGuardWorkflow


def test_an_empty_list_lets_anyone_decide_and_a_listed_name_passes() -> None:
    check_approver("mallory", [], field="by", source="the guard's approvers")
    check_approver("alice", ["bob", "alice"], field="approver", source="approvals.approvers in the request")


def test_a_name_outside_the_list_is_refused_naming_the_field_and_the_allowed_names() -> None:
    with pytest.raises(ApplicationError) as err:
        check_approver("mallory", ["alice", "bob"], field="by", source="the guard's approvers")
    assert err.value.type == REFUSED and err.value.non_retryable
    assert err.value.message == ("by: 'mallory' may not approve or decide here: the name is not on the list of "
                                 "approvers (the guard's approvers)")


def test_the_refusal_shows_the_name_escaped_on_one_line_and_not_the_list() -> None:
    with pytest.raises(ApplicationError) as err:
        check_approver("eve\n- alice: approve", ["al\x1b[2Jice", "bob"], field="approver", source="x")
    assert "\n" not in err.value.message and "\x1b" not in err.value.message
    assert "'eve\\\\n- alice: approve'" in err.value.message or "eve\\n- alice: approve" in err.value.message
    assert "Jice" not in err.value.message and "bob" not in err.value.message  # who would pass is not disclosed


def test_a_name_differing_only_in_case_or_spaces_is_not_on_the_list() -> None:
    for who in ("Alice", "alice ", " alice"):
        with pytest.raises(ApplicationError):
            check_approver(who, ["alice"], field="approver", source="x")


class Recorder:
    """A notifier that keeps every notification (the registry's webhooks, in a test)."""

    def __init__(self) -> None:
        self.sent: list[Notification] = []

    async def send(self, n: Notification, **_: Any) -> bool:
        self.sent.append(n)
        return True


async def test_the_guards_dismiss_and_approve_refuse_a_name_outside_its_approvers(env: Any, tmp_path: Path) -> None:
    svc, tq = service(), f"tq-{service()}"
    registry, _ = fleet_with({"ap-south-1": 3.0})
    notes = Recorder()
    registry.notifier = notes  # type: ignore[assignment]
    proposed = lambda: [n for n in notes.sent if n.event == "guard_awaiting_approval"]  # noqa: E731
    async with running_worker(env.client, registry, tq, tmp_path):
        handle = await start(env.client, guard_input(svc, rules={"mode": "propose"}, approvers=["alice"]), tq)
        # the proposal is in the state before the notice's activity has run: wait for both
        state = await wait_for(handle, lambda s: bool(s.proposals) and bool(proposed()))
        proposal = state.proposals[0]
        assert proposal.region == "ap-south-1" and len(proposed()) == 1
        for fn, arg, field in [
            (RegionGuardWorkflow.dismiss, DismissGuard(region="ap-south-1", by="mallory", reason="noise"), "by"),
            (RegionGuardWorkflow.approve, ApproveGuard(region="ap-south-1", approver="mallory"), "approver"),
        ]:
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await update(handle, fn, arg)
            assert err.value.cause.message == (f"{field}: 'mallory' may not approve or decide here: the name is not on "
                                               "the list of approvers (the guard's approvers)")
        # nothing changed: the same proposal stands, several looks later, proposed and notified once
        state = await wait_for(handle, lambda s: s.look >= state.look + 3)
        assert state.proposals == [proposal] and state.status == "awaiting_approval" and not state.approvals
        assert [d.action for d in state.decisions if d.region == "ap-south-1"] == ["propose"]
        assert len(proposed()) == 1
        assert not [a for a in state.audit if a.who == "mallory"]
        # an approver may dismiss it
        await update(handle, RegionGuardWorkflow.dismiss, DismissGuard(region="ap-south-1", by="alice", reason="known"))
        state = await wait_for(handle, lambda s: any(a.who == "alice" and "dismissed" in a.detail for a in s.audit))
        await stop(handle)
