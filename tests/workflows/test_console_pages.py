"""The pages the release manager reads: every look shows its evidence, every kind of run has a page, and what a
page offers to copy is, once rendered, what was meant. Markdown is rendered as the Web UI renders it: CommonMark
with a typographer (which turns a bare `--` into an en dash and quotes into curly ones)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from datetime import UTC, datetime

from markdown_it import MarkdownIt

from canary.config import MetricResult
from common.text import code_span
from common.text import markdown as md
from common.types import Notification
from workflows.drill.details import view as drill_view
from workflows.drill.models import DrillInput, DrillReport, RegionDrill
from workflows.evacuation.models import HealthValue
from workflows.guard.details import verdict_cell
from workflows.guard.models import RegionWatch
from workflows.revert.details import revert_details
from workflows.revert.models import RevertRegion, RevertState

UI = MarkdownIt("commonmark", {"typographer": True}).enable(["replacements", "smartquotes", "table"])
AT = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)


def rendered_code(markdown: str) -> list[str]:
    """The text of every code span of the rendered page, as a person copies it."""
    tokens = [t for block in UI.parse(markdown) for t in (block.children or [])]
    return [t.content for t in tokens if t.type == "code_inline"]


def rendered_text(markdown: str) -> str:
    tokens = [t for block in UI.parse(markdown) for t in (block.children or [])]
    return "".join(t.content for t in tokens if t.type in ("text", "code_inline"))


def test_a_flag_in_free_text_renders_as_typed() -> None:
    hint = "too little capacity: add receivers (--to) or stop at a higher last level (--steps)"
    assert "–" in rendered_text(hint)  # the bug: the typographer's en dash
    assert rendered_text(md(hint)) == hint and rendered_code(md(hint)) == ["--to", "--steps"]


def test_a_code_span_holds_any_text_as_itself() -> None:
    for text in ["1.9.0", "a`b", "`x`", "--to", '{"by": "<your name>"}']:
        assert rendered_code(code_span(text)) == [text], text


def _revert(**kw: object) -> RevertState:
    base = dict(revert_id="revert/pay/1.9.0", service="pay", to_version="1.9.0", requested_by="al",
                request_reason="INC-7", release="rollout/pay/2.0.0", release_version="2.0.0", phase="reverting")
    return RevertState.model_validate({**base, **kw})


def test_the_revert_page_shows_its_version_and_payload_as_themselves() -> None:
    page = revert_details(_revert())
    assert rendered_code(page)[0] == "1.9.0"  # was `1\.9.0`: escapes are not read in a code span
    assert '{"by": "<your name>", "reason": "why"}' in rendered_code(page)  # was {"by": ""}: <your name> read as a tag


def test_a_reverted_release_is_named_on_the_revert_page_with_when() -> None:
    page = revert_details(_revert(phase="reverted", ended_at=AT))
    assert "rollout/pay/2.0.0 is reverted: its stages run 1.9.0 again since 2026-12-04 09:30 UTC" in rendered_text(page)


def test_the_revert_health_shows_values_and_n_and_no_data_is_never_healthy() -> None:
    look = MetricResult(name="latency_p99", classification="Pass", baseline_mean=120.0, canary_mean=118.0,
                        baseline_n=60, canary_n=58)
    healthy = RevertRegion(region="eu-west-1", environment="prod", wave=1, status="reverted", health="look 1/1: healthy",
                           values=[HealthValue.of("eu-west-1", look)])
    nodata = RevertRegion(region="us-east-1", environment="prod", wave=1, status="reverted", no_data=True,
                          health="look 1/1: no data: latency_p99",
                          values=[HealthValue(region="us-east-1", metric="latency_p99", classification="Nodata")])
    text = rendered_text(revert_details(_revert(regions=[healthy, nodata])))
    assert "healthy — latency_p99: 120 → 118 (pass; n 60 → 58)" in text, text
    assert "no data — latency_p99: – → – (NO DATA; n 0 → 0)" in text and text.count("healthy") == 1, text


def test_a_guard_region_is_healthy_only_beside_the_values_it_was_compared_on() -> None:
    look = MetricResult(name="error_rate", classification="Pass", baseline_mean=0.002, canary_mean=0.0021,
                        baseline_n=120, canary_n=60)
    healthy = RegionWatch(region="eu-west-1", verdict="look 3/10: healthy", values=[HealthValue.of("eu-west-1", look)])
    assert verdict_cell(healthy) == "**healthy** — error\\_rate: peers 0.002 → 0.0021 (pass; n 120 → 60)"
    assert verdict_cell(RegionWatch(region="x", verdict="no data", no_data=True)).startswith("**no data**")
    assert not verdict_cell(RegionWatch(region="x", verdict="look 1/10: healthy")).startswith("**healthy**")


def test_a_drill_has_attributes_and_a_page() -> None:
    inp = DrillInput.model_validate({"service": "pay", "requested_by": "al", "regions": ["eu-west-1", "us-east-1"]})
    report = DrillReport(service="pay", started_at=AT, regions=[RegionDrill(
        region="eu-west-1", evacuation="evacuated: 2 steps", restore="restored", drain_seconds=12.0,
        receivers_health=["step 1 (50%): healthy"])])
    attrs, page = drill_view(report, inp, current="us-east-1")
    assert {a.key.name: a.value for a in attrs} == {"BifrostService": "pay", "BifrostStatus": "running",
                                                   "BifrostStage": "us-east-1/prod", "BifrostRequestedBy": "al"}
    text = rendered_text(page)
    assert "Drill of pay (prod) — running" in text and "Drilling now: us-east-1" in text
    assert "eu-west-1: evacuation evacuated: 2 steps; restore restored; drained in 12 s" in text, text


def test_notices_that_matter_look_it_and_traffic_notices_say_what_moved_it_and_why() -> None:
    from activities.adapters.webhooks import URGENT_ICON, slack_payload
    from common import notices

    auto = notices.traffic(workflow_id="traffic/pay", service="pay", direction="evacuate", region="eu-west-1",
                           event=notices.TRAFFIC_STARTED, text="3 steps", weights={"eu-west-1": 0},
                           started_by="guard/pay", requested_by="bifrost-guard",
                           why="region guard: eu-west-1 unhealthy for 3 looks: latency_p99 high")
    by_hand = notices.traffic(workflow_id="traffic/pay", service="pay", direction="evacuate", region="eu-west-1",
                              event=notices.TRAFFIC_STARTED, text="3 steps", weights={}, requested_by="alice",
                              why="INC-42")
    assert auto.urgent and not by_hand.urgent
    assert "started by guard/pay (bifrost-guard): region guard: eu-west-1 unhealthy" in auto.text
    assert "started by alice: INC-42" in by_hand.text
    payload = slack_payload(auto)
    assert str(payload["text"]).startswith(f"{URGENT_ICON} *URGENT* ")
    assert not str(slack_payload(by_hand)["text"]).startswith(URGENT_ICON)
    assert "*Why*\\nregion guard" in str(payload["blocks"]).replace("\n", "\\n"), payload["blocks"]
    rolled_back = Notification(rollout_id="rollout/pay/2.0.0", service="pay", version="2.0.0",
                               event="rollout_rolled_back", text="rolled back")
    held = notices.held(rollout_id="rollout/pay/2.0.0", service="pay", version="2.0.0", stage="eu-west-1/prod", wave=1,
                        reason="canary failed", approvers=[], times_out_at=AT, on_timeout="rollback")
    started = Notification(rollout_id="rollout/pay/2.0.0", service="pay", version="2.0.0", event="rollout_started", text="")
    assert notices.is_urgent(rolled_back) and notices.is_urgent(held) and not notices.is_urgent(started)
    assert str(slack_payload(held)["text"]).startswith(URGENT_ICON) and str(slack_payload(rolled_back)["text"]).startswith(URGENT_ICON)


def _recorded(name: str) -> tuple[str, list]:
    import json
    from pathlib import Path

    from temporalio.client import WorkflowHistory

    data = json.loads((Path(__file__).parent.parent / "histories" / f"{name}.json").read_text())
    return data["workflow_id"], list(WorkflowHistory.from_json(data["workflow_id"], data["history"]).events)


def test_a_reverted_release_is_read_from_the_reverts_own_history_only() -> None:
    from activities.releases import verified_revert

    revert_id, events = _recorded("revert-reverted-00")
    queue = events[0].workflow_execution_started_event_attributes.task_queue.name
    rec = verified_revert(events, revert_id=revert_id, task_queue=queue)
    assert rec is not None and rec.release.startswith("rollout/") and rec.to_version == "1.0.0" and rec.ended_at
    assert verified_revert(events, revert_id=revert_id, task_queue="hand-started") is None  # another queue: no worker of ours
    assert verified_revert(events, revert_id="revert/other/1.0.0", task_queue=queue) is None
    assert verified_revert(events[:-1], revert_id=revert_id, task_queue=queue) is None  # not ended
    aborted_id, aborted = _recorded("revert-aborted-00")
    assert verified_revert(aborted, revert_id=aborted_id, task_queue=queue) is None  # an aborted revert reverted nothing


def test_a_stage_page_says_not_to_reset_it_and_how_to_retry_it_as_typed() -> None:
    from workflows.stage.details import stage_details
    from workflows.stage.models import StageState

    st = StageState.model_validate({"key": "eu-west-1/prod", "region": "eu-west-1", "environment": "prod",
                                    "status": "held", "version_before": "1.9.0"})
    page = stage_details(st, service="pay", version="2.0.0")
    assert "Do not Reset this stage’s workflow" in rendered_text(page)  # the typographer's apostrophe
    code = rendered_code(page)
    assert '{"stage": "eu-west-1/prod", "action": "retry", "by": "<your name>", "reason": "why"}' in code, code
    assert "bifrost retry ROLLOUT_ID --stage eu-west-1/prod" in code, code


def test_the_readiness_query_and_guard_status_show_standing_differences() -> None:
    """A standing difference is a known risk: the readiness query and `bifrost guard status` show it, not only the
    guard's page."""
    from activities.guard_models import Readiness
    from bifrost_cli.guard import print_guard
    from workflows.guard.details import readiness_view
    from workflows.guard.models import GuardState

    why = "error_rate x1.50, as usual at this time of day (error_rate x1.02 against its own history)"
    state = GuardState(workflow_id="guard/payments", service="payments", regions={
        "eu-west-1": RegionWatch(region="eu-west-1", standing=why, readiness=Readiness(region="eu-west-1", ready=True)),
        "us-east-1": RegionWatch(region="us-east-1"),
        "ap-south-1": RegionWatch(region="ap-south-1", serving=False, evacuated_by_guard=True)})
    view = readiness_view(state)
    assert set(view) == {"eu-west-1", "us-east-1"}  # serving regions only
    assert view["eu-west-1"] == {"ready": True, "problems": [], "receivers": {}, "standing": why}
    assert view["us-east-1"] == {"ready": None, "problems": [], "receivers": {}, "standing": ""}
    out = io.StringIO()
    with redirect_stdout(out):
        print_guard(state)
    lines = [line for line in out.getvalue().splitlines() if "standing difference" in line]
    assert lines == [f"    standing difference (as usual at this time of day; not evacuated): {why}"]
