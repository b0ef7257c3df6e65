"""How traffic shifts step by step: set the weights, wait at least the TTL (a durable timer a stop cuts short),
then judge the regions that gain traffic against their own pre-shift window; an alarm stops the shift (`Alarm`)
and the ending reverts to the last healthy step. Each health look has a ReportWorkflow draw it per region."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.models import ReportInput
    from activities.traffic.messages import HealthInput, HealthResult, RegionHealth, SetWeightsInput, SetWeightsResult
    from activities.traffic.shift import TrafficActivities
    from common import metrics, notices
    from common.types import MetricWindow
    from workflows.evacuation.calls import CHANGE, HEALTH, SET_WEIGHTS, text
    from workflows.evacuation.models import HealthValue, StepRecord
    from workflows.evacuation.progress import Progress
    from workflows.report.workflow import start_report


class Alarm(Exception):
    """The health check after step `step` alarmed (or could not be done)."""

    def __init__(self, step: int, reasons: str) -> None:
        super().__init__(reasons)
        self.step = step
        self.reasons = reasons


async def set_weights(run: Progress, weights: dict[str, int], why: str) -> SetWeightsResult:
    """Set the record set's weights, expecting what this run last set (a conflict means someone else moved them)."""
    res = await workflow.execute_activity_method(
        TrafficActivities.set_weights,
        SetWeightsInput(service=run.inp.service, environment=run.inp.environment, region=run.inp.region,
                        weights=weights, expect=run.state.weights_now, regions=run.state.set_identifiers, why=why),
        summary=why, cancellation_type=CHANGE, **SET_WEIGHTS,
    )
    run.state.weights_now = res.weights
    return res


async def shift(run: Progress) -> None:
    """Walk the plan's steps; raises Alarm on a bad health look, Stopped on a stop."""
    plan, inp = run.planned, run.inp
    start = workflow.now()
    baseline = MetricWindow(start=start - timedelta(minutes=inp.health_check_minutes), end=start,
                            interval_seconds=inp.health_interval_seconds)
    checks = [RegionHealth(region=r.region, metrics=r.health, peer=peer_of(run, r.region)) for r in plan.gaining if r.health]
    n = len(plan.steps)
    run.notice(notices.TRAFFIC_STARTED, f"{n} steps {plan.levels} toward {plan.steps[-1] if plan.steps else {}}",
               run.state.weights_now)
    for i, weights in enumerate(plan.steps, 1):
        rec = await _step(run, i, weights)
        if not checks:
            rec.health = "no region gains traffic: nothing to check"
            continue
        await _check(run, rec, HealthInput(service=inp.service, environment=inp.environment, regions=checks,
                                           baseline_window=baseline, window=_window(run, rec), judge=inp.judge,
                                           look=i, max_looks=n), start)


def peer_of(run: Progress, region: str) -> str | None:
    """What a restore judges the restored region against: the receiver serving the most now, over the same window
    (the restored region served nothing before the restore, so its own pre-shift window has no data). An
    evacuation judges each receiver against its own pre-shift window (None)."""
    if run.inp.direction != "restore":
        return None
    peers = [r for r in run.planned.regions if r.role == "receiver" and r.region != region and r.weight_before > 0]
    return max(peers, key=lambda r: (r.weight_before, r.region)).region if peers else None


def _window(run: Progress, rec: StepRecord) -> MetricWindow:
    """The look after a step: from when its weights applied until now."""
    return MetricWindow(start=rec.applied_at, end=workflow.now(), interval_seconds=run.inp.health_interval_seconds)


async def _step(run: Progress, i: int, weights: dict[str, int]) -> StepRecord:
    """Step `i`: at a safe point, set its weights, then wait the step's wait (TTL at least) unless stopped."""
    plan, n = run.planned, len(run.planned.steps)
    await run.wait_unpaused(f"step {i}/{n}")
    rec = StepRecord(index=i, level=plan.levels[i - 1], weights=weights, started_at=workflow.now())
    run.state.steps.append(rec)
    metrics.evacuation_step(workflow.metric_meter(), service=run.inp.service, region=run.inp.region)
    run.set_status("shifting", doing=f"step {i}/{n}: weights {weights}")
    res = await set_weights(run, weights, f"step {i}/{n} ({rec.level}%)")
    rec.changed, rec.applied_at = res.changed, workflow.now()
    run.state.step = i
    run.audit("bifrost", "step", f"{i}/{n}: {rec.level}% → {res.weights}" + ("" if res.changed else " (already in place)"))
    run.notice(notices.TRAFFIC_STEP, f"step {i}/{n} ({rec.level}%) applied; health check after the TTL", res.weights)
    wait = timedelta(seconds=run.state.wait_seconds)
    ttl = "the TTL" if run.state.wait_seconds == plan.ttl_seconds else f"TTL {plan.ttl_seconds} s"
    run.set_status("shifting", doing=f"{wait.total_seconds():g} s ({ttl}) after step {i}/{n}, then a health check")
    try:
        await workflow.wait_condition(lambda: run.controls.stopping, timeout=wait, timeout_summary=f"TTL after step {i}/{n}")
    except TimeoutError:
        pass
    run.controls.raise_if_stopped()
    rec.health_started_at = workflow.now()
    return rec


async def _check(run: Progress, rec: StepRecord, look: HealthInput, start: datetime) -> None:
    """The health look after a step: judge the gaining regions, record it, have it drawn; raise Alarm if bad."""
    i, n = rec.index, look.max_looks
    run.set_status("shifting", doing=f"health check after step {i}/{n}")
    look.report_owner = workflow.info().workflow_id  # one evacuation id per service: the start time tells runs apart
    look.report_id = f"{run.inp.direction}-{run.inp.region}-{start:%Y%m%dT%H%M%S}-step-{i}"
    try:
        health: HealthResult = await workflow.execute_activity_method(
            TrafficActivities.check_health, look, summary=f"health after step {i}/{n}", **HEALTH,
        )
    except ActivityError as err:
        rec.checked_at, rec.healthy, rec.health = workflow.now(), False, f"health check failed: {text(err)}"
        raise Alarm(i, rec.health) from err
    missing = health.no_data
    rec.compared_with = {c.region: f"{c.peer} over the same window" for c in look.regions if c.peer}
    rec.checked_at, rec.healthy = workflow.now(), None if missing and not health.alarm else not health.alarm
    rec.health = health.summary if not missing else f"NO DATA ({', '.join(missing)}) — {health.summary}"
    rec.values = [HealthValue.of(r.region, m) for r in health.regions if r.monitor is not None for m in r.monitor.metrics]
    draw_reports(run, rec, look, health)
    if health.alarm:
        raise Alarm(i, "; ".join(health.reasons) or health.summary)
    if missing and run.inp.direction == "restore":  # bringing traffic back on no evidence is not safe
        raise Alarm(i, f"no data to judge the restored region ({', '.join(missing)}): a restore goes on only on a "
                       "comparison with data")
    run.set_status("shifting")


def draw_reports(run: Progress, rec: StepRecord, look: HealthInput, health: HealthResult) -> None:
    """Have a ReportWorkflow draw each checked region's look (the primary before the shift against after the
    step) and keep where it will open; starts them without waiting (the end of the workflow waits)."""
    regions = {c.region: c.metrics for c in look.regions}
    drawn = [(r, analysis_id) for r in health.regions
             if r.monitor is not None and r.report_url and r.version and (analysis_id := look.region_report_id(r.region))]
    for r, _ in drawn:
        rec.reports[r.region] = r.report_url or ""
    # started beside the next step, not before it: waiting for each child's start cost the drain about 2 s
    # (benchmarks/guard_e2e.py, 20.2 s against 18.2 s without reports); the end waits for them
    run.report_starts.extend(asyncio.create_task(start_report(ReportInput(
        stage=run.stage(r.region), rollout_id=look.report_owner or workflow.info().workflow_id, analysis_id=analysis_id,
        metrics=regions[r.region], judge=look.judge, window=look.window, baseline_window=look.baseline_window,
        baseline_version=r.version, canary_version=r.version or "", canary_role="primary", monitor=r.monitor,
    ), f"health report {r.region} after step {rec.index}")) for r, analysis_id in drawn)
