"""The shared workflow controls (workflows/controls/): status from phase + holds, holds, refusals, payloads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from common.types import TERMINAL, RolloutStatus
from common.vocabulary import EVACUATION_TERMINAL
from tests.workflows.controlled import ControlledStub
from workflows.controls import (
    HOLD_PRECEDENCE,
    HOLD_STATUS,
    ControlledState,
    Controls,
    Hold,
    Stopped,
    status_of,
    waiting_for,
)
from workflows.evacuation.models import AbortShift, EvacuationState
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Pause

T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
PHASES = ["planning", "running", "rolling_back", "succeeded", "rolled_back", "aborted", "rejected", "failed"]




holds = st.builds(Hold, reason=st.sampled_from(list(HOLD_STATUS)), since=st.just(T0), by=st.sampled_from(["bifrost", "al"]),
                  releases=st.sampled_from(["resume", "approval of wave 2"]), at=st.sampled_from(["", "before wave 2"]),
                  in_force=st.booleans())


@given(phase=st.sampled_from(PHASES), hs=st.lists(holds, max_size=4))
def test_the_status_is_the_phase_or_the_hold_in_force_by_precedence(phase: str, hs: list[Hold]) -> None:
    status = status_of(phase, hs, TERMINAL)
    in_force = [h.reason for h in hs if h.in_force]
    if phase in TERMINAL or not in_force:
        assert status == phase  # an ended workflow shows its outcome whatever was left holding
        assert waiting_for(hs, "x") == ("x" if not in_force else waiting_for(hs))
    else:
        first = min(in_force, key=HOLD_PRECEDENCE.index)
        assert status == HOLD_STATUS[first]
        assert waiting_for(hs) == next(h for h in hs if h.reason == first and h.in_force).waiting_for


def test_a_pause_not_yet_in_force_leaves_the_status_but_is_recorded() -> None:
    pause = Hold(reason="paused", since=T0, by="carol", why="db", releases="resume", in_force=False)
    assert status_of("running", [pause], TERMINAL) == "running"
    pause.in_force, pause.at = True, "before wave 3"
    assert status_of("running", [pause], TERMINAL) == "paused"
    assert pause.waiting_for == "resume (held before wave 3)"


def test_the_user_visible_words_stay_the_rollout_statuses() -> None:
    # every status a hold can show is a RolloutStatus (BifrostStatus values the UI list and the CLI read)
    assert set(HOLD_STATUS.values()) <= set(get_args(RolloutStatus))
    assert {"paused", "queued", "awaiting_approval", "waiting_window", "waiting_traffic", "held"} <= set(HOLD_STATUS.values())


def test_the_rollout_state_derives_the_approval_from_its_hold() -> None:
    gate = Hold(reason="approval", since=T0, by="bifrost", releases="approval of wave 4", wave=4, gates=["wave-4"])
    state = RolloutState(rollout_id="r", service="s", version="1", holds=[gate])
    assert (state.awaiting_wave, state.pending_approvals) == (4, ["wave-4"])
    dumped = state.model_dump(mode="json")
    assert dumped["awaiting_wave"] == 4 and dumped["pending_approvals"] == ["wave-4"]  # the status query shows them
    again = RolloutState.model_validate(dumped)  # the CLI reads the query's answer back
    assert again.awaiting_wave == 4 and again.holds == [gate]
    state.holds.clear()
    assert (state.awaiting_wave, state.pending_approvals) == (None, [])


def _controls(**kw: Any) -> Controls[str]:
    return Controls(ControlledStub(), noun="rollout", terminal=TERMINAL, **kw)


def test_a_pause_or_resume_sent_while_stopping_is_refused() -> None:
    c = _controls(stop_word=lambda s: s)
    c.validate_pause()  # running, not paused: fine
    with pytest.raises(ApplicationError, match="not paused"):
        c.validate_resume()
    assert c.halt("aborted") and not c.halt("rejected")  # the first stop wins
    assert c.stop == "aborted"
    for check in (c.validate_pause, c.validate_resume, c.check_running):
        with pytest.raises(ApplicationError, match="already aborted; nothing to do") as info:
            check()
        assert info.value.type == "Refused" and info.value.non_retryable
    with pytest.raises(Stopped):
        c.raise_if_stopped()


def test_a_stopping_workflow_without_a_stop_word_says_stopping_and_an_ended_one_its_phase() -> None:
    c = Controls[AbortShift](EvacuationState(workflow_id="traffic/p", service="p", region="eu"),
                             noun="evacuation of eu", terminal=EVACUATION_TERMINAL)
    c.halt(AbortShift(by="al", reason="why"))
    with pytest.raises(ApplicationError, match="the evacuation of eu is already stopping"):
        c.validate_pause()
    c.stop = None
    c.state.phase = "evacuated"
    with pytest.raises(ApplicationError, match="already evacuated"):
        c.check_running()


def test_a_second_pause_is_refused_naming_who_paused() -> None:
    c = _controls()
    c.state.holds.append(Hold(reason="paused", since=T0, by="carol", releases="resume", in_force=False))
    with pytest.raises(ApplicationError, match=r"already paused \(by carol\); use resume"):
        c.validate_pause()
    c.validate_resume()


def test_status_and_waiting_for_are_computed_from_phase_and_holds_and_an_end_clears_the_holds() -> None:
    c = _controls()
    s = c.state
    s.holds.append(Hold(reason="lock", since=T0, releases="the payments lock", by="bifrost"))
    assert (s.status, s.waiting_for) == ("queued", "the payments lock")  # no sync: read from the holds
    s.holds[0].in_force = False
    s.doing = "wave 1"
    assert (s.status, s.waiting_for) == ("running", "wave 1")
    c.enter("aborted")
    assert (s.status, s.waiting_for, s.holds) == ("aborted", None, [])


def test_every_update_payload_is_strict_and_refuses_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Pause.model_validate({"by": "al", "reason": "x", "wave": 1})
    with pytest.raises(ValidationError, match="revert"):
        AbortShift.model_validate({"by": "al", "reason": "x", "revert": "yes"})  # no coercion of what was typed


@pytest.mark.parametrize("text", ["eu-west-1/staging", "us-east-1", "-eu/prod", "EU/prod", "eu/prod/x", "a" * 64 + "/prod", ""])
def test_the_one_stage_key_rule_refuses_what_is_not_a_stage_everywhere(text: str) -> None:
    from common.types import is_stage_key
    from workflows.request import ApprovalGate
    from workflows.rollout.updates import OverrideWindow, SkipSoak

    assert not is_stage_key(text)
    for model, payload in ((SkipSoak, {"stage": text, "by": "al", "reason": "x"}),
                           (OverrideWindow, {"stage": text, "by": "al", "reason": "x"}),
                           (ApprovalGate, {"stage": text})):
        with pytest.raises(ValidationError, match="stage"):
            model.model_validate(payload)


def test_the_one_stage_key_rule_takes_every_planned_stage() -> None:
    from common.types import is_stage_key, stage_key
    from workflows.rollout.updates import SkipSoak

    for region in ("eu-west-1", "a", "a" * 63, "ap-south-1"):
        for env in ("test", "prod"):
            key = stage_key(region, env)
            assert is_stage_key(key) and SkipSoak(stage=key, by="al", reason="x").stage == key


# -- the shared update handlers (pause_updates, stop_update) -----------------------------------------------------
def _updates(cls: type) -> dict[str, Any]:
    from temporalio.workflow import _Definition

    return {name: u for name, u in _Definition.must_from_class(cls).updates.items() if name is not None}


def test_the_shared_updates_keep_each_workflows_names_descriptions_payloads_and_validators() -> None:
    from workflows.controls import Ack, Resume
    from workflows.evacuation.workflow import EvacuationWorkflow
    from workflows.guard.models import StopGuard
    from workflows.guard.workflow import RegionGuardWorkflow
    from workflows.revert.workflow import RevertWorkflow
    from workflows.rollout.updates import Abort

    expect = {
        EvacuationWorkflow: ("abort", AbortShift, "before the next step", "Continue a paused evacuation."),
        RegionGuardWorkflow: ("stop", StopGuard, "before the next look", "Look again."),
        RevertWorkflow: ("abort", Abort, "before the next wave", "Continue a paused revert."),
    }
    for cls, (stop, payload, holds_at, resume_says) in expect.items():
        ups = _updates(cls)
        assert {"pause", "resume", stop} <= ups.keys(), cls
        assert ups["pause"].arg_types == [Pause] and ups["resume"].arg_types == [Resume], cls
        assert ups[stop].arg_types == [payload], cls  # the UI's dialog and the converter decode the workflow's own type
        for name in ("pause", "resume", stop):
            assert ups[name].ret_type is Ack and ups[name].validator is not None, (cls, name)
        assert ups["pause"].description.startswith(f"Hold {holds_at}"), cls
        assert ups["resume"].description.startswith(resume_says), cls


def test_the_shared_validators_refuse_a_stopping_workflow() -> None:
    from workflows.evacuation.workflow import EvacuationWorkflow

    ups = _updates(EvacuationWorkflow)
    wf: Any = type("Fake", (), {})()
    wf.controls = Controls[AbortShift](EvacuationState(workflow_id="traffic/p", service="p", region="eu"),
                                       noun="evacuation of eu", terminal=EVACUATION_TERMINAL)
    ups["pause"].validator(wf, Pause(by="al"))  # running, not paused: accepted
    wf.controls.halt(AbortShift(by="al", reason="why"))
    for name, arg in (("pause", Pause(by="bo")), ("abort", AbortShift(by="bo", reason="again"))):
        with pytest.raises(ApplicationError, match="the evacuation of eu is already stopping"):
            ups[name].validator(wf, arg)


def test_a_child_traffic_change_says_in_one_line_how_it_ended() -> None:
    from workflows.evacuation.child import TrafficChange
    from workflows.evacuation.settings import EvacuationInput

    move = EvacuationInput(service="pay", region="eu-west-1", requested_by="bifrost")
    assert TrafficChange(move, busy=True).line == ("could not evacuate eu-west-1: another traffic change of pay is "
                                                   "running (traffic/pay)")
    failed = EvacuationState(workflow_id="traffic/pay", service="pay", region="eu-west-1", status="failed")
    assert TrafficChange(move, state=failed, text="plan refused").line == "could not evacuate eu-west-1: plan refused"
    done = EvacuationState(workflow_id="traffic/pay", service="pay", region="eu-west-1", status="evacuated",
                           reason="weights {}")
    assert TrafficChange(move, state=done, completed=True).line == "evacuate of eu-west-1: evacuated (weights {})"


# -- status and waiting_for: computed, never stored --------------------------------------------------------------
def test_every_controlled_state_computes_its_status_and_a_dump_with_it_validates_again() -> None:
    from workflows.guard.models import GuardState
    from workflows.revert.models import RevertState

    pause = Hold(reason="paused", since=T0, by="al", releases="resume", at="before wave 2")
    states: list[ControlledState[Any]] = [
        RolloutState(rollout_id="r", service="s", version="1", phase="running"),
        EvacuationState(workflow_id="traffic/p", service="p", region="eu", phase="shifting"),
        RevertState(revert_id="revert/p/1", service="p", to_version="1", requested_by="al", phase="reverting"),
        GuardState(workflow_id="guard/p", service="p"),
    ]
    for state in states:
        working = state.status
        state.holds.append(pause.model_copy())
        assert (state.status, state.waiting_for) == ("paused", "resume (held before wave 2)"), type(state)
        dumped = state.model_dump(mode="json")
        assert (dumped["status"], dumped["waiting_for"]) == ("paused", "resume (held before wave 2)")
        again = type(state).model_validate(dumped)  # a query's answer, a continue-as-new input, an old history
        assert again == state and again.status == "paused"
        again.holds.clear()
        assert again.status == working and again.model_dump()["status"] == working
        stale = type(state).model_validate({**dumped, "status": "failed", "waiting_for": "x"})
        assert stale.status == "paused" and stale.waiting_for == pause.waiting_for  # the stored words are ignored


def test_a_state_given_only_its_status_word_takes_it_as_its_phase() -> None:
    ended = EvacuationState(workflow_id="traffic/p", service="p", region="eu", status="failed")
    assert (ended.phase, ended.status, ended.finished) == ("failed", "failed", True)
    held = RolloutState(rollout_id="r", service="s", version="1", status="paused")  # a hold's word, not a phase
    assert (held.phase, held.status) == ("planning", "planning")
    with pytest.raises(AttributeError):
        held.status = "running"  # type: ignore[misc]  # not stored: nothing to set


def test_each_status_list_is_its_phases_and_the_words_of_the_holds_it_places() -> None:
    from common import vocabulary as v

    for phase, status, terminal, holds_placed in (
        (v.RolloutPhase, v.RolloutStatus, v.ROLLOUT_TERMINAL, HOLD_PRECEDENCE),
        (v.EvacuationPhase, v.EvacuationStatus, v.EVACUATION_TERMINAL, ("paused", "approval")),
        (v.RevertPhase, v.RevertStatus, v.REVERT_TERMINAL, ("paused", "lock")),
        (v.GuardPhase, v.GuardStatus, v.GUARD_TERMINAL, ("paused", "approval")),
    ):
        assert set(get_args(status)) == set(get_args(phase)) | {HOLD_STATUS[r] for r in holds_placed}, status
        assert terminal <= set(get_args(phase))
    assert set(HOLD_PRECEDENCE) == set(get_args(v.HoldReason)) == set(HOLD_STATUS)
