"""EvacuationWorkflow: move a region's traffic to the others (pre-warmed, step by step, health-checked), or back.

One workflow per service (`traffic/<service>`): plan (read-only, refuses before anything changes), optional
approval, pre-warm the regions that gain traffic, then per step: change the weighted records, wait at least
the TTL (a durable timer), judge the gaining regions against their own pre-shift window. An alarm reverts
to the last healthy step. A restore walks the same levels back and then scales the receivers down.
Where a HorizontalPodAutoscaler scales a region, pre-warm raises its floor (minReplicas) instead of the replicas
it would undo, and the floor the plan read goes back on restore, on abort with revert, and on a failure before
any traffic moved (docs/traffic.md, "Pre-warm with autoscalers").
Operators pause, resume, abort and approve with validated updates; `status` and the current details say
where it is, who asked and why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.models import ReportInput
    from activities.notify import NotifyActivities
    from activities.traffic.messages import (
        HealthInput,
        HealthResult,
        ReadTrafficInput,
        RegionHealth,
        ScaleInput,
        SetWeightsInput,
        SetWeightsResult,
    )
    from activities.traffic.shift import CONFLICT, REFUSED, TrafficActivities
    from common import metrics, notices
    from common.traffic.models import PlanInput, TrafficPlan
    from common.types import EVACUATION_FAILED, OUTCOME_FAILURE_TYPES, MetricWindow, StageRef
    from workflows import options, search
    from workflows.controls import Ack, Controls, Stopped, check_approver, pause_updates, refused, stop_update
    from workflows.controls.ending import end_canceled, name_canceller
    from workflows.evacuation.details import evacuation_details
    from workflows.evacuation.models import (
        EVACUATION_TERMINAL,
        AbortShift,
        ApproveShift,
        EvacuationInput,
        EvacuationPhase,
        EvacuationState,
        HealthValue,
        StepRecord,
        aborted_message,
        evacuation_id,
    )
    from workflows.report.workflow import start_report

NON_RETRYABLE = [*options.NON_RETRYABLE, REFUSED, CONFLICT]
# Every activity on the path heartbeats (activities/heartbeat.py), so a dead worker's activity moves to another
# worker within the heartbeat timeout instead of its start-to-close timeout.
PLAN = options.ActivityOptions(
    start_to_close_timeout=timedelta(minutes=2),
    heartbeat_timeout=options.HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
# A weight change waits for Route 53 to be INSYNC (minutes at worst); a retry is safe (a no-op once applied).
SET_WEIGHTS = options.ActivityOptions(
    start_to_close_timeout=timedelta(minutes=10),
    heartbeat_timeout=options.HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=1),
                             maximum_attempts=10, non_retryable_error_types=NON_RETRYABLE),
)
SCALE = options.ActivityOptions(
    start_to_close_timeout=timedelta(minutes=15),
    heartbeat_timeout=options.HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=1),
                             maximum_attempts=4, non_retryable_error_types=NON_RETRYABLE),
)
HEALTH = options.ActivityOptions(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=options.HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=1),
                             maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE),
)
# Reading back the weights at the end: Route 53 may answer slowly; retried, heartbeating.
READ = options.ActivityOptions(
    start_to_close_timeout=timedelta(minutes=2),
    heartbeat_timeout=options.HEARTBEAT,
    retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                             maximum_attempts=10, non_retryable_error_types=NON_RETRYABLE),
)
# Changes are never abandoned half way: a cancellation waits for the running change to finish.
CHANGE = ActivityCancellationType.WAIT_CANCELLATION_COMPLETED


class _Alarm(Exception):
    """Internal: the health check after step `step` alarmed (or could not be done)."""

    def __init__(self, step: int, reasons: str) -> None:
        super().__init__(reasons)
        self.step = step
        self.reasons = reasons


def _cause(err: BaseException) -> BaseException:
    """What an activity's failure says (its ApplicationError), not the wrapper around it."""
    if isinstance(err, ActivityError) and err.cause is not None:
        return err.cause
    return err


def _text(err: BaseException) -> str:
    """An error's own message, without the `Type: ` prefix ApplicationError adds."""
    cause = _cause(err)
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


# An aborted evacuation or restore ends as a failure of type Aborted with its state as the details (the rollouts'
# convention: red in the UI, read back by the CLI); one started by hand (no parent) ends Canceled instead, its state
# in the memo. Each health look names a report per checked region and has a ReportWorkflow draw it.


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class EvacuationWorkflow:
    """One evacuation or restore of one region of one service."""

    @workflow.init
    def __init__(self, inp: EvacuationInput) -> None:
        self.inp = inp
        self.state = EvacuationState.of(inp, workflow.info().workflow_id)
        self.plan: TrafficPlan | None = None
        what = "evacuation" if inp.direction == "evacuate" else "restore"
        self.controls: Controls[AbortShift] = Controls(self.state, noun=f"{what} of {inp.region}",
                                                       terminal=EVACUATION_TERMINAL)
        self.approved: ApproveShift | None = None
        self.report_starts: list[asyncio.Task[None]] = []  # health reports being started; awaited before the end
        self._outbox: list[asyncio.Future[bool]] = []  # notices on their way; the end waits for them
        self._metered: str | None = None
        self._hpa = False  # the plan found autoscalers and this run handles them

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: EvacuationInput) -> EvacuationState:
        self.state.started_at = workflow.now()
        self._audit(inp.requested_by, inp.direction, f"{inp.region}: {inp.reason or '(no reason given)'}")
        self._set_status("planning", doing="the plan: reading the record set and replicas")
        problems = inp.problems()
        if problems:
            lines = "\n".join(f"  - {p}" for p in problems)
            return await self._end("refused", f"{inp.direction} of {inp.region} for {inp.service} refused, nothing was changed:\n{lines}")
        try:
            self.plan = await workflow.execute_activity_method(
                TrafficActivities.plan_traffic,
                PlanInput(service=inp.service, region=inp.region, environment=inp.environment, direction=inp.direction,
                          receivers=inp.receivers, steps=inp.steps, headroom=inp.headroom, prewarm=inp.prewarm,
                          restore_to=inp.restore_to, home_weights=inp.home_weights),
                summary=f"plan {inp.direction} of {inp.region}", **PLAN,
            )
        except ActivityError as err:
            cause = _cause(err)
            refused = isinstance(cause, ApplicationError) and cause.type == REFUSED
            status: EvacuationPhase = "refused" if refused else "failed"
            why = _text(err) if refused else f"could not plan (nothing was changed): {_text(err)}"
            return await self._end(status, why)
        except asyncio.CancelledError:
            return await self._cancelled("cancelled before anything changed")
        plan = self.plan
        self.state.take_plan(plan)
        self._hpa = bool(self.state.autoscalers)
        self.state.wait_seconds = inp.step_wait_seconds(plan.wait_seconds)
        self.state.planned_at = workflow.now()
        self._audit("bifrost", "plan", f"{len(plan.steps)} steps {plan.levels}; wait {self.state.wait_seconds} s; "
                    f"receivers {', '.join(self.state.receivers) or '-'}")
        try:
            await self._approval()
            await self._wait_unpaused("the pre-warm")
            await self._prewarm()
            await self._shift()
            await self._scale_down()
        except _Alarm as alarm:
            return await self._revert_after_alarm(alarm)
        except Stopped:
            return await self._aborted()
        except asyncio.CancelledError:
            return await self._cancelled(f"cancelled at step {self.state.step}: traffic left where it is (no revert)")
        except (ActivityError, ApplicationError) as err:
            return await self._failed(f"{_text(err)}; stopped at step {self.state.step}")
        done: EvacuationPhase = "evacuated" if inp.direction == "evacuate" else "restored"
        return await self._end(done, f"{inp.region} {done}: weights {self.state.weights_now}")

    async def _approval(self) -> None:
        if not self.inp.require_approval:
            return
        who = ", ".join(self.inp.approvers) or "anyone"
        self.controls.hold("approval", releases=f"approve (by {who}) before anything changes")
        self._publish()
        try:
            await workflow.wait_condition(
                lambda: self.approved is not None or self.controls.stopping,
                timeout=timedelta(minutes=self.inp.approval_timeout_minutes), timeout_summary="approval timeout",
            )
        except TimeoutError:
            timeout = AbortShift(by="bifrost", reason=f"no approval within {self.inp.approval_timeout_minutes:g} min")
            self.controls.halt(timeout)
            self._audit("bifrost", "approval-timeout", timeout.reason)
        self.controls.release("approval")
        self.controls.raise_if_stopped()

    async def _prewarm(self) -> None:
        assert self.plan is not None
        todo = [r for r in self.plan.regions if r.prewarm_to is not None]
        if not todo:
            self.state.prewarmed_at = workflow.now()
            return
        self._set_status("pre_warming", doing="receivers to be scaled and ready: " + ", ".join(
            f"{r.region} {r.replicas_before}→{r.prewarm_to}" + (f" (HPA {r.autoscaler} minReplicas)" if self._hpa and r.autoscaler else "")
            for r in todo))
        for r in todo:
            if self._hpa and r.autoscaler is not None:  # before the change: a crash after it still puts it back
                self.state.raised[r.region] = r.prewarm_to or 0
        results = await asyncio.gather(*(
            workflow.execute_activity_method(
                TrafficActivities.scale,
                ScaleInput(stage=self._stage(r.region), replicas=r.prewarm_to or 0, direction="up", max_replicas=r.max_replicas,
                           autoscaler=r.autoscaler if self._hpa else None),
                summary=f"pre-warm {r.region} to {r.prewarm_to}", cancellation_type=CHANGE, **SCALE,
            ) for r in todo), return_exceptions=True)
        for r, res in zip(todo, results):
            if not isinstance(res, BaseException):
                self.state.scaled[r.region] = res.after
                if res.autoscaler is not None and res.min_after is not None:
                    self.state.min_replicas_now[r.region] = res.min_after
                floor = f"; HPA {res.autoscaler} minReplicas {res.min_before} → {res.min_after}" if res.autoscaler else ""
                self._audit("bifrost", "pre-warm", f"{r.region}: {res.before} → {res.after} replicas{floor}")
        for res in results:
            if isinstance(res, BaseException):
                if isinstance(res, ActivityError):
                    raise ApplicationError(f"pre-warm failed, no traffic was moved: {_text(res)}") from res
                raise res
        self.state.prewarmed_at = workflow.now()

    async def _shift(self) -> None:
        assert self.plan is not None
        plan, inp = self.plan, self.inp
        start = workflow.now()
        baseline = MetricWindow(start=start - timedelta(minutes=inp.health_baseline_minutes), end=start,
                                interval_seconds=inp.health_interval_seconds)
        checks = [RegionHealth(region=r.region, metrics=r.health) for r in plan.gaining if r.health]
        n = len(plan.steps)
        wait = timedelta(seconds=self.state.wait_seconds)
        self._notice(notices.TRAFFIC_STARTED, f"{n} steps {plan.levels} toward {plan.steps[-1] if plan.steps else {}}",
                     self.state.weights_now)
        for i, weights in enumerate(plan.steps, 1):
            await self._wait_unpaused(f"step {i}/{n}")
            rec = StepRecord(index=i, level=plan.levels[i - 1], weights=weights, started_at=workflow.now())
            self.state.steps.append(rec)
            metrics.evacuation_step(workflow.metric_meter(), service=inp.service, region=inp.region)
            self._set_status("shifting", doing=f"step {i}/{n}: weights {weights}")
            res = await self._set_weights(weights, f"step {i}/{n} ({rec.level}%)")
            rec.changed, rec.applied_at = res.changed, workflow.now()
            self.state.step = i
            self._audit("bifrost", "step", f"{i}/{n}: {rec.level}% → {res.weights}" + ("" if res.changed else " (already in place)"))
            self._notice(notices.TRAFFIC_STEP, f"step {i}/{n} ({rec.level}%) applied; health check after the TTL",
                         res.weights)
            ttl = "the TTL" if self.state.wait_seconds == plan.ttl_seconds else f"TTL {plan.ttl_seconds} s"
            self._set_status("shifting", doing=f"{wait.total_seconds():g} s ({ttl}) after step {i}/{n}, then a health check")
            try:
                await workflow.wait_condition(lambda: self.controls.stopping, timeout=wait,
                                              timeout_summary=f"TTL after step {i}/{n}")
            except TimeoutError:
                pass
            self.controls.raise_if_stopped()
            rec.health_started_at = workflow.now()
            if not checks:
                rec.health = "no region gains traffic: nothing to check"
                continue
            self._set_status("shifting", doing=f"health check after step {i}/{n}")
            window = MetricWindow(start=rec.applied_at, end=workflow.now(), interval_seconds=inp.health_interval_seconds)
            look = HealthInput(service=inp.service, environment=inp.environment, regions=checks, baseline_window=baseline,
                               window=window, judge=inp.judge, look=i, max_looks=n)
            look.report_owner = workflow.info().workflow_id  # one evacuation id per service: the start time tells runs apart
            look.report_id = f"{inp.direction}-{inp.region}-{start:%Y%m%dT%H%M%S}-step-{i}"
            try:
                health: HealthResult = await workflow.execute_activity_method(
                    TrafficActivities.check_health, look, summary=f"health after step {i}/{n}", **HEALTH,
                )
            except ActivityError as err:
                rec.checked_at, rec.healthy, rec.health = workflow.now(), False, f"health check failed: {_text(err)}"
                raise _Alarm(i, rec.health) from err
            rec.checked_at, rec.healthy, rec.health = workflow.now(), not health.alarm, health.summary
            rec.values = [HealthValue.of(r.region, m) for r in health.regions if r.monitor is not None for m in r.monitor.metrics]
            self._draw_reports(rec, look, health)
            if health.alarm:
                raise _Alarm(i, "; ".join(health.reasons) or health.summary)
            self._set_status("shifting")

    def _draw_reports(self, rec: StepRecord, look: HealthInput, health: HealthResult) -> None:
        """Have a ReportWorkflow draw each checked region's look (the primary before the shift against after the
        step) and keep where it will open; starts them without waiting (the end of the workflow waits)."""
        metrics = {c.region: c.metrics for c in look.regions}
        drawn = [(r, analysis_id) for r in health.regions
                 if r.monitor is not None and r.report_url and r.version and (analysis_id := look.region_report_id(r.region))]
        for r, _ in drawn:
            rec.reports[r.region] = r.report_url or ""
        # started beside the next step, not before it: waiting for each child's start cost the drain about 2 s
        # (benchmarks/guard_e2e.py, 20.2 s against 18.2 s without reports); `_end` waits for them
        self.report_starts.extend(asyncio.create_task(start_report(ReportInput(
            stage=self._stage(r.region), rollout_id=look.report_owner or workflow.info().workflow_id, analysis_id=analysis_id,
            metrics=metrics[r.region], judge=look.judge, window=look.window, baseline_window=look.baseline_window,
            baseline_version=r.version, canary_version=r.version or "", canary_role="primary", monitor=r.monitor,
        ), f"health report {r.region} after step {rec.index}")) for r, analysis_id in drawn)

    async def _scale_down(self) -> None:
        assert self.plan is not None
        # a restore puts back the evacuation's floors and its own; an evacuation's floors hold its traffic
        floors = self._floors(evacuations_too=True) if self.inp.direction == "restore" else {}
        todo = [r for r in self.plan.regions if r.scale_down_to is not None and not (self._hpa and r.autoscaler)]
        if not todo and not floors:
            return
        self._set_status("scaling_down", doing="regions to scale back: " + ", ".join(
            [f"{r.region} {r.replicas_before}→{r.scale_down_to}" for r in todo]
            + [f"{region} HPA minReplicas → {n}" for region, n in floors.items()]))
        await self._scale_back({r.region: r.scale_down_to or 0 for r in todo}, "scale down", floors)

    def _floors(self, *, evacuations_too: bool = False) -> dict[str, int]:
        """The HPA floors this workflow raised, back to what its plan read; with `evacuations_too` (a restore that
        ended) also the evacuation's, from restore_to. An aborted restore leaves those: its traffic is back out."""
        if not self._hpa:
            return {}
        floors = {r: self.state.min_replicas_before[r] for r in self.state.raised if r in self.state.min_replicas_before}
        if evacuations_too and self.inp.restore_to is not None:
            floors |= {r: n for r, n in self.inp.restore_to.min_replicas.items() if r in self.state.autoscalers}
        return floors

    async def _scale_back(self, targets: dict[str, int], action: str, floors: dict[str, int] | None = None) -> None:
        """Scale primaries down to `targets`, and put HPA floors back to `floors` (the HPA then scales at its pace)."""
        floors = floors or {}
        inputs = [ScaleInput(stage=self._stage(region), replicas=n, direction="down") for region, n in targets.items()]
        inputs += [ScaleInput(stage=self._stage(region), replicas=n, direction="down", autoscaler=self.state.autoscalers[region],
                              min_replicas=n) for region, n in floors.items()]
        results = await asyncio.gather(*(
            workflow.execute_activity_method(
                TrafficActivities.scale, si,
                summary=f"{action} {si.stage.region} to " + (f"minReplicas {si.min_replicas}" if si.autoscaler else str(si.replicas)),
                cancellation_type=CHANGE, **SCALE,
            ) for si in inputs), return_exceptions=True)
        failed = []
        for si, res in zip(inputs, results):
            region = si.stage.region
            if isinstance(res, BaseException):
                failed.append(f"{region}: {_text(res)}")
            elif si.autoscaler is not None:
                self.state.raised.pop(region, None)
                if res.min_after is not None:
                    self.state.min_replicas_now[region] = res.min_after
                self._audit("bifrost", action, f"{region}: HPA {res.autoscaler} minReplicas {res.min_before} → {res.min_after}")
            else:
                self.state.scaled[region] = res.after
                self._audit("bifrost", action, f"{region}: {res.before} → {res.after} replicas")
        if failed:
            raise ApplicationError(f"{action} failed ({'; '.join(failed)})")

    # -- endings -----------------------------------------------------------------------------------
    async def _revert_after_alarm(self, alarm: _Alarm) -> EvacuationState:
        assert self.plan is not None
        k = alarm.step
        back = self.plan.steps[k - 2] if k >= 2 else self.state.weights_before
        where = f"step {k - 1} ({self.plan.levels[k - 2]}%)" if k >= 2 else "the weights before the first step"
        self._audit("bifrost", "alarm", f"after step {k}: {alarm.reasons}")
        self._set_status("reverting", reason=f"alarm after step {k}: {alarm.reasons}", doing=f"revert to {where}")
        try:
            await self._set_weights(back, f"revert to {where} after an alarm")
        except (ActivityError, asyncio.CancelledError) as err:
            return await self._end("failed", f"alarm after step {k} ({alarm.reasons}), and the revert to {where} "
                                   f"failed: {_text(err)}; set the weights by hand")
        self.state.step = k - 1
        return await self._end("reverted", f"alarm after step {k}: {alarm.reasons}; traffic is back at {where}; "
                               "pre-warmed regions keep their replicas")

    async def _aborted(self) -> EvacuationState:
        stop = self.controls.stop
        assert stop is not None
        what = f"aborted by {stop.by}: {stop.reason}"
        if self.state.weights_now == self.state.weights_before and not self.state.scaled and not self.state.raised:
            return await self._end("aborted", f"{what}; nothing was changed")
        if not stop.revert:
            return await self._end("aborted", f"{what}; traffic and replicas left as they are (step {self.state.step})")
        self._set_status("reverting", reason=what, doing="the weights and replicas before")
        try:
            if self.state.weights_now != self.state.weights_before:
                await self._set_weights(self.state.weights_before, "revert after abort")
                self.state.step = 0
                if self.state.scaled and self.plan is not None:
                    wait = timedelta(seconds=self.plan.wait_seconds + self.inp.extra_wait_seconds)
                    self._set_status("reverting", doing=f"{wait.total_seconds():g} s (TTL) before scaling back")
                    await workflow.sleep(wait, summary="TTL before scaling back")
            if self.state.scaled or self.state.raised:
                await self._scale_back({r: self.state.replicas_before[r] for r in self.state.scaled
                                        if r in self.state.replicas_before and r not in self.state.raised}, "scale back",
                                       self._floors())
        except (ActivityError, ApplicationError, asyncio.CancelledError) as err:
            return await self._end("failed", f"{what}; the revert failed: {_text(err)}; check the weights and replicas by hand")
        return await self._end("aborted", f"{what}; weights and replicas put back as they were")

    async def _failed(self, what: str) -> EvacuationState:
        """A failure: with no traffic moved, the HPA floors it raised go back; with traffic moved they stay with it."""
        if not self.state.raised:
            return await self._end("failed", f"{what}, nothing reverted")
        raised = ", ".join(f"{r} {n}" for r, n in sorted(self.state.raised.items()))
        if self.state.weights_now != self.state.weights_before:
            return await self._end("failed", f"{what}, nothing reverted; the HPA floors stay raised ({raised}) for the "
                                   "traffic moved: `bifrost restore` puts them back")
        self._set_status("reverting", doing=f"the HPA floors before ({raised})")
        try:
            await self._scale_back({}, "put back", self._floors())
        except (ActivityError, ApplicationError, asyncio.CancelledError) as err:
            return await self._end("failed", f"{what}, no traffic moved; putting the HPA floors back failed: {_text(err)}; "
                                   "set their minReplicas by hand")
        return await self._end("failed", f"{what}, no traffic moved; the HPA floors are back as they were")

    async def _cancelled(self, reason: str) -> EvacuationState:
        """End aborted by a cancellation request, naming who sent it (in the reason and the audit trail)."""
        reason = f"{reason}; {await name_canceller(self.controls)}"
        return await self._end("aborted", reason)

    async def _end(self, status: EvacuationPhase, reason: str) -> EvacuationState:
        """Read back the weights and replicas, set the final status, and return (or fail, for refused/failed)."""
        if self.plan is not None:
            try:
                snap = await workflow.execute_activity_method(
                    TrafficActivities.read_traffic,
                    ReadTrafficInput(service=self.inp.service, environment=self.inp.environment, region=self.inp.region,
                                     replicas_of=sorted(self.state.replicas_before)),
                    summary="read back weights and replicas", **READ,
                )
                self.state.weights_after, self.state.replicas_after = snap.weights, snap.replicas
                self.state.weights_now = snap.weights
            except ActivityError as err:
                self.state.weights_after = dict(self.state.weights_now)
                reason += f" (could not read back the final weights: {_text(err)})"
                if status in ("evacuated", "restored"):  # the end state comes from the record set, never the plan
                    status, reason = "failed", f"{reason}; the weights Route 53 holds are unknown, check them"
            if status in ("evacuated", "restored") and self.plan.steps:
                planned = self.plan.steps[-1]
                off = {k: v for k, v in self.state.weights_after.items() if planned.get(k, v) != v}
                if off:
                    status = "failed"
                    reason = (f"the {self.inp.direction} planned to end at {planned} but the record set reads "
                              f"{self.state.weights_after}; it did not end as planned, check who else moves traffic")
        await asyncio.gather(*self.report_starts, return_exceptions=True)  # no report child left unstarted
        self.state.ended_at = workflow.now()
        self._audit("bifrost", status, reason)
        self._set_status(status, reason=reason)
        if self.state.steps:  # traffic moved (or was meant to): say where it ended
            self._notice(notices.TRAFFIC_ENDED, f"{status}: {reason}", self.state.weights_now)
        await asyncio.gather(*self._outbox, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if status in ("refused", "failed"):
            message = reason if status == "refused" else f"{self.inp.direction} of {self.inp.region} failed: {reason}"
            raise ApplicationError(message, self.state,
                                   type=REFUSED if status == "refused" else EVACUATION_FAILED, non_retryable=True)
        if status == "aborted" and workflow.info().parent is None:
            # one started by hand ends Canceled like an aborted rollout, its state in the memo; a child (of a stage,
            # a guard, a drill, a revert) fails `Aborted` below: its parent reads the state from the failure
            await end_canceled(self.state, "evacuation")  # returns only if it cannot
        if status == "aborted":  # red, like an aborted rollout
            raise ApplicationError(aborted_message(self.state), self.state, type=OUTCOME_FAILURE_TYPES["aborted"],
                                   non_retryable=True)
        return self.state

    # -- helpers -----------------------------------------------------------------------------------
    def _notice(self, event: str, text: str, weights: dict[str, int]) -> None:
        """Tell people that traffic moves (never waits, never fails the evacuation); see common/notices.py."""
        n = notices.traffic(workflow_id=self.state.workflow_id, service=self.inp.service, direction=self.inp.direction,
                            region=self.inp.region, event=event, text=text, weights=weights)
        self._outbox.append(asyncio.ensure_future(workflow.execute_activity_method(
            NotifyActivities.notify, n, summary=f"notify {event}", **options.NOTIFY)))

    def _stage(self, region: str) -> StageRef:
        return StageRef(service=self.inp.service, region=region, environment=self.inp.environment)

    async def _set_weights(self, weights: dict[str, int], why: str) -> SetWeightsResult:
        res = await workflow.execute_activity_method(
            TrafficActivities.set_weights,
            SetWeightsInput(service=self.inp.service, environment=self.inp.environment, region=self.inp.region,
                            weights=weights, expect=self.state.weights_now, regions=self.state.set_identifiers, why=why),
            summary=why, cancellation_type=CHANGE, **SET_WEIGHTS,
        )
        self.state.weights_now = res.weights
        return res

    async def _wait_unpaused(self, where: str) -> None:
        await self.controls.wait_unpaused(where, self._publish)

    def _audit(self, who: str, action: str, detail: str = "") -> None:
        self.controls.audit(who, action, None, detail)

    def _set_status(self, phase: EvacuationPhase, *, reason: str | None = None, doing: str | None = None) -> None:
        """Every transition: the phase, what it works on, and (derived from them and the holds) what is shown."""
        if reason is not None:
            self.state.reason = reason
        self.controls.enter(phase, doing=doing)
        self._publish()

    def _publish(self) -> None:
        """The search attributes, the metrics and the UI's current details, all from the state."""
        metrics.evacuation_status_changed(workflow.metric_meter(), service=self.inp.service, region=self.inp.region,
                                          before=self._metered or self.state.status, after=self.state.status)
        self._metered = self.state.status
        self.controls.publish([
            search.SERVICE.value_set(self.inp.service),
            search.STATUS.value_set(self.state.status),
            search.STAGE.value_set(f"{self.inp.region}/{self.inp.environment}"),
            search.REQUESTED_BY.value_set(self.inp.requested_by),
        ], evacuation_details(self.state))

    # -- queries and updates -----------------------------------------------------------------------
    @workflow.query(description="Plan, weights and replicas before/now, every step and its health, audit trail.")
    def status(self) -> EvacuationState:
        return self.state

    pause, resume = pause_updates(
        holds_at="before the next step",
        pause='Hold before the next step (a running step and its TTL wait finish). JSON: {"by": "alice", "reason": "why"}.',
        resume='Continue a paused evacuation. JSON: {"by": "alice"}.')

    def _abort(self, req: AbortShift) -> str:
        self.controls.halt(req)
        self._audit(req.by, "abort", f"{req.reason} (revert: {str(req.revert).lower()})")
        return "stopping; " + ("reverting to the weights and replicas before" if req.revert else "leaving traffic where it is")

    abort = stop_update(AbortShift, _abort, description='Stop now; "revert": true puts the weights and replicas back as they were, false leaves them. JSON: {"by": "alice", "reason": "why", "revert": true}.')

    @workflow.update(description='Let an evacuation waiting for approval start changing traffic. JSON: {"approver": "alice", "comment": "go"}.')
    def approve(self, req: ApproveShift) -> Ack:
        self.approved = req
        self._audit(req.approver, "approve", req.comment)
        return Ack(message=f"approved by {req.approver}")

    @approve.validator
    def _validate_approve(self, req: ApproveShift) -> None:
        self.controls.check_running()
        if self.controls.held("approval") is None or self.approved is not None:
            raise refused(f"not waiting for approval (status: {self.state.status}"
                             f"{'' if self.inp.require_approval else '; this evacuation did not ask for one'})")
        check_approver(req.approver, self.inp.approvers, field="approver", source="the evacuation's approvers")


# -- the EvacuationWorkflow as a child: the one way a stage, a revert, the guard or a drill runs it -------------
@dataclass(frozen=True)
class TrafficChange:
    """How a child evacuation or restore ended: its state, or why it did not start or did not finish."""

    move: EvacuationInput
    state: EvacuationState | None = None  # the result; a failed child's state when its failure carried it
    completed: bool = False  # the child ran to its end (any status); false: not started or failed
    busy: bool = False  # not started: another traffic change of the service runs (its id is evacuation_id)
    refused: bool = False  # the child failed with REFUSED: it changed nothing
    why: str = ""  # the child's failure in its own words (the guard's and the drill's records)
    text: str = ""  # the same failure as one redacted line (error_text)

    @property
    def line(self) -> str:
        """One line on how it ended, for a stage's or a revert's reason."""
        m = self.move
        if self.busy:
            return (f"could not {m.direction} {m.region}: another traffic change of {m.service} is running "
                    f"({evacuation_id(m.service)})")
        if not self.completed or self.state is None:
            return f"could not {m.direction} {m.region}: {self.text}"
        done = self.state
        return f"{m.direction} of {m.region}: {done.status}" + (f" ({done.reason})" if done.reason else "")


async def run_traffic_change(
    move: EvacuationInput, *, summary: str,
    parent_close_policy: workflow.ParentClosePolicy = workflow.ParentClosePolicy.REQUEST_CANCEL,
    shield: Callable[[Awaitable[EvacuationState]], Awaitable[EvacuationState]] | None = None,
) -> TrafficChange:
    """Run `move` as a child EvacuationWorkflow (`traffic/<service>`) and map how it ended; never raises for it.

    `shield`: a caller that must finish what it started (a stage) wraps the child so a cancellation is noted."""
    child = workflow.execute_child_workflow(
        EvacuationWorkflow.run, move, id=evacuation_id(move.service), task_queue=workflow.info().task_queue,
        parent_close_policy=parent_close_policy, static_summary=summary)
    try:
        done = await (shield(child) if shield is not None else child)
    except WorkflowAlreadyStartedError:
        return TrafficChange(move, busy=True)
    except ChildWorkflowError as err:
        cause = err.cause
        failed = None
        if isinstance(cause, ApplicationError) and cause.details:
            failed = EvacuationState.model_validate(cause.details[0])
        return TrafficChange(move, state=failed, why=cause.message if isinstance(cause, ApplicationError) else str(cause),
                             refused=isinstance(cause, ApplicationError) and cause.type == REFUSED, text=error_text(err))
    return TrafficChange(move, state=done, completed=True)
