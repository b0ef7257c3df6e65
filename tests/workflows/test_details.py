"""The UI's current details and the summary query: pure functions of a rollout's state."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.workflows.helpers import make_request
from workflows.controls import AuditEntry, Hold
from workflows.plan import build_plan
from workflows.rollout.details import (
    approval_releases,
    holds_at,
    how_to_act,
    rollout_details,
    rollout_search,
    rollout_summary,
)
from workflows.rollout.models import RolloutState
from workflows.stage.details import stage_details
from workflows.stage.models import StageState

T0 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def row(*cells: str) -> str:
    """A table row as the UI needs it: every cell ends in an em space, or the UI runs the cells together."""
    return "| " + " | ".join(f"{c}\u2003" for c in cells) + " |"


def _state(**overrides: object) -> RolloutState:
    req = make_request(service="payments", approvals={"gates": [{"wave": 4}], "approvers": ["alice"]})
    plan = build_plan(req)
    stages = [StageState.of(s.region, s.environment, w.index) for w in plan.waves for s in w.stages]
    for st in stages:
        st.version_before = st.version_now = "1.0.0"
    state = RolloutState(rollout_id="rollout/payments/2.0.0", service="payments", version="2.0.0",
                         phase="running", waves=len(plan.waves), stages=stages)
    for k, v in overrides.items():
        setattr(state, k, v)
    return state


def test_the_table_lists_every_stage_with_versions_verdict_and_soak():
    state = _state(current_wave=2, current_stages=["ap-south-1/prod"])
    first, second = state.stages[0], state.stages[1]
    first.status, first.version_now, first.verdict, first.score = "succeeded", "2.0.0", "pass", 100.0
    first.awaiting_verdict = True
    first.report_url = "http://127.0.0.1:8234/r/ap-south-1-test.html"
    second.status, second.version_now, second.soak_looks, second.soak_max_looks = "soaking", "2.0.0", 3, 12
    second.soak_ends_at = datetime(2026, 12, 1, 14, 5, tzinfo=UTC)
    text = rollout_details(state, build_plan(make_request()), soaking=["ap-south-1/prod"])
    assert "## payments `2.0.0` — **RUNNING** · wave 2&#47;6" in text
    assert row("wave", "stage", "status", "version", "verdict", "soak") in text
    assert row("1", "ap-south-1/test", "succeeded (may roll back)", "`1.0.0` → `2.0.0`",
               "[pass 100](http://127.0.0.1:8234/r/ap-south-1-test.html)", "–") in text
    assert row("2", "**ap-south-1/prod**", "soaking", "`1.0.0` → `2.0.0`", "–", "look 3&#47;12, ends 2026-12-01 14:05 UTC") in text
    assert row("6", "eu-west-1/prod", "pending", "`1.0.0`", "–", "–") in text
    assert '`skip_soak` `{"stage": "ap-south-1/prod"' in text


def test_waiting_at_a_gate_says_what_the_approval_releases():
    req = make_request(service="payments", blast_radius={"canary_region": "ap-south-1", "max_parallel_regions": 2,
                                                         "max_parallel_prod_regions": 2},
                       approvals={"gates": [{"stage": "us-east-1/prod"}]})
    plan = build_plan(req)
    prod_wave = next(w for w in plan.waves if "us-east-1/prod" in [s.key for s in w.stages])
    assert approval_releases(plan, prod_wave.index) == (
        f"wave {prod_wave.index} releases us-east-1/prod + eu-west-1/prod, 80% of production traffic")
    gate = Hold(reason="approval", since=T0, by="bifrost", releases=f"approval of wave {prod_wave.index} (gates: us-east-1/prod)",
                wave=prod_wave.index, gates=["us-east-1/prod"])
    state = _state(holds=[gate], current_wave=prod_wave.index)  # status and waiting_for: computed from the hold
    text = rollout_details(state, plan, soaking=[])
    assert f"**Waiting for:** approval of wave {prod_wave.index} (gates: us-east-1/prod)\n\n**If approved:** wave" in text
    assert f'`approve` `{{"wave": {prod_wave.index}, "approver": "<your name>"' in text


def test_a_pause_shows_who_why_and_where_it_holds():
    state = _state(current_wave=2, current_stages=["ap-south-1/prod"], holds=[Hold(reason="paused", since=T0, by="carol", why="db migration", releases="resume", in_force=False)])
    state.stages[1].status = "analyzing"
    assert holds_at(state) == "before promoting ap-south-1/prod and before wave 3"
    text = rollout_details(state, None, soaking=[])
    assert "**Paused** by carol at 2026-12-01 09:30 UTC: “db migration” — holds before promoting ap-south-1/prod and before wave 3" in text
    assert [name for name, _ in how_to_act(state, soaking=[])] == ["resume", "abort"]


def test_recent_actions_show_the_last_five_audit_lines():
    audit = [AuditEntry(at=T0, who=f"user{i}", action="pause", detail=f"why {i}") for i in range(8)]
    text = rollout_details(_state(audit=audit), None, soaking=[])
    assert "user2" not in text and "- 12-01 09:30 user3: pause — why 3" in text and "user7" in text


def test_a_finished_rollout_offers_no_actions_and_keeps_its_reason():
    state = _state(phase="rolled_back", reason="eu-west-1/prod: canary judged fail")
    text = rollout_details(state, None, soaking=[])
    assert "**Reason:** eu-west-1/prod: canary judged fail" in text and "How to act" not in text


def test_summary_is_one_line_per_stage():
    state = _state(current_wave=1)
    state.stages[0].status, state.stages[0].version_now = "analyzing", "1.0.0"
    summary = rollout_summary(state)
    assert summary.rollout == "payments 2.0.0" and summary.wave == "1/6"
    assert summary.stages["ap-south-1/test"] == "analyzing, 1.0.0"
    assert len(summary.model_dump_json()) < len(state.model_dump_json()) / 2


def test_a_stage_page_after_a_rollback_by_scope_says_so():
    st = StageState.of("ap-south-1", "prod", 2)
    st.status, st.version_before, st.version_now = "rolled_back", "1.0.0", "1.0.0"
    st.reason = "rolled back by the rollout (scope all): us-east-1/prod: canary judged fail"
    st.verdict, st.score = "pass", 100.0
    text = stage_details(st, service="payments", version="2.0.0")
    assert "## Stage ap-south-1/prod — **ROLLED BACK**" in text
    assert "payments: `1.0.0` → `2.0.0`; now on `1.0.0`" in text
    assert "**Reason:** rolled back by the rollout (scope all)" in text


def test_a_report_is_a_link_only_where_a_browser_can_open_it():
    st = StageState.of("ap-south-1", "test", 1)
    st.status, st.verdict, st.score = "succeeded", "pass", 96.5
    st.report_url = "https://reports.example.com/r/ap-south-1-test.html"
    assert "**Verdict:** pass (score 96.5) — [canary report](https://reports.example.com/r/ap-south-1-test.html)" \
        in stage_details(st, service="payments", version="2.0.0")
    st.report_url = "/var/lib/bifrost/reports/ap-south-1-test.html"  # on the worker's disk: no dead link
    text = stage_details(st, service="payments", version="2.0.0")
    assert "canary report (`/var/lib/bifrost/reports/ap-south-1-test.html`)" in text and "](" not in text
    state = _state(stages=[st])
    assert row("1", "ap-south-1/test", "succeeded", "`?`", "pass 96.5", "–") in rollout_details(
        state, None, soaking=[])


def test_a_stage_page_says_why_its_canary_analysis_was_extended():
    st = StageState.of("ap-south-1", "test", 1)
    st.status, st.analysis_looks = "analyzing", 2
    st.extended = "analysis extended: inconclusive on error_rate (p=0.0039): 60 more samples per side (look 2/3)\n| x"
    text = stage_details(st, service="payments", version="2.0.0")
    assert ("**Canary analysis:** look 2 — analysis extended: inconclusive on error\\_rate (p=0.0039): "
            "60 more samples per side (look 2&#47;3)\\\\n\\| x") in text  # one line: the newline shown, the pipe escaped
    st.extended, st.analysis_looks = "", 1
    assert "Canary analysis" not in stage_details(st, service="payments", version="2.0.0")


def _environment(state: RolloutState) -> str:
    return next(str(u.value) for u in rollout_search(state, "ci") if u.key.name == "BifrostEnvironment")


def test_environment_is_the_furthest_one_changed_not_the_latest_wave_started():
    """Waves alternate test and prod (ap-south-1 test, prod; us-east-1 test, prod; eu-west-1 test, prod)."""
    state = _state(holds=[Hold(reason="approval", since=T0, by="bifrost", releases="approval of wave 5", wave=5)],
                   current_wave=5)
    assert _environment(state) == "-"  # nothing changed yet
    state.stages[0].status = "succeeded"
    assert _environment(state) == "test"
    # waiting at its last gate, two prod stages on the new version and the last test wave done
    for st in state.stages[:5]:
        st.status, st.version_now = "succeeded", "2.0.0"
    assert [st.environment for st in state.stages[4:]] == ["test", "prod"]
    assert _environment(state) == "prod"
    # paused after its first prod wave, before the next test wave
    paused = _state(holds=[Hold(reason="paused", since=T0, by="carol", releases="resume")], current_wave=2)
    paused.stages[0].status = paused.stages[1].status = "succeeded"
    assert _environment(paused) == "prod"
    # a prod stage skipped (already on the version) changed nothing; ended rollouts keep the furthest one
    skipped = _state(phase="succeeded")
    skipped.stages[0].status, skipped.stages[1].status = "succeeded", "skipped"
    assert _environment(skipped) == "test"
    paused.phase = "rolled_back"
    assert _environment(paused) == "prod"
