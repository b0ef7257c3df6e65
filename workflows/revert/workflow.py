"""RevertWorkflow: undo a finished release — every region it changed back to an earlier version, in reverse wave order.

No canary and no soak: the version going back was in production before. Each region is deployed (the deployer's
rollback to a version), then its primary is judged against its own window from just before the revert (the soak
monitor's look, through the traffic health check), so its time is the deploys plus the health checks. With
`evacuate`, a production region's traffic moves to the other regions first (EvacuationWorkflow) and back after the
deploy. A health alarm, a deploy error or a traffic move that fails stops the revert before the next region, and
the reason says which regions still run the release's version.

It takes the service lock as a rollout does (workflows/lock/): while a rollout of the service runs it is refused,
naming that rollout (on_conflict `reject`, the default), or waits for it to end (`queue`). The release to undo is
read once the lock is ours, from the server's records (activities/releases.py), never from the input; the input
is checked against it — an unknown service, a version the service never ran before the release, stages the release
does not have — and refused before anything is deployed. Pause, resume and abort are the shared controls'
(workflows/controls/); an abort stops before the next region (regions already reverted stay reverted), and the
revert ends Canceled with its final state in the `bifrost_outcome` memo, as an aborted rollout does (workflows/controls/ending.py,
patch aborted-revert-ends-canceled); any other stop ends Failed with the state as the failure's details.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import RollbackInput, StageOnly
    from activities.notify import NotifyActivities
    from activities.releases import ReleaseActivities, ReleaseFound, ReleaseQuery
    from activities.traffic.messages import HealthInput, RegionHealth
    from activities.traffic.shift import TrafficActivities
    from canary.config import JudgeConfig
    from common import notices
    from common.failures import INVALID_REQUEST, OUTCOME_FAILURE_TYPES
    from common.lock import LOCK_CLAIM_QUERY, LockClaim
    from common.text import markdown as md
    from common.types import MetricWindow, Notification, StageRef
    from workflows import options, search
    from workflows.controls import Controls, Stopped, pause_updates, stop_update
    from workflows.controls.ending import CANCEL_REASON, end_canceled, name_canceller
    from workflows.evacuation.models import EvacuationInput, EvacuationState
    from workflows.evacuation.workflow import run_traffic_change
    from workflows.lock.workflow import GRANTED_SIGNAL, REFUSED_SIGNAL, SUPERSEDED_SIGNAL, LockAnswer, ServiceLock
    from workflows.plan import PlanError, build_plan
    from workflows.provenance import require_own_id
    from workflows.request import RolloutRequest
    from workflows.revert.models import REVERT_TERMINAL, RevertInput, RevertPhase, RevertRegion, RevertState
    from workflows.rollout.models import RolloutState
    from workflows.rollout.updates import Abort

FAILURE_TYPES = {**OUTCOME_FAILURE_TYPES, "invalid": INVALID_REQUEST}
AUDIT_LINES = 5
# A queued revert tells people which rollout it waits behind (a timer, a lock query and a notify activity).
QUEUED_NOTICE_AFTER = timedelta(seconds=10)  # as a rollout's: a lock not granted by then is held by a running rollout


@dataclass(frozen=True)
class RevertStop:
    """Why the revert ends early: its final status and the reason."""

    status: RevertPhase
    reason: str


class _Invalid(Exception):
    """Internal: the input does not fit the release (or there is none); refused before anything is deployed."""


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RevertWorkflow:
    """Put one service back on an earlier version everywhere a finished release changed it."""

    @workflow.init
    def __init__(self, inp: RevertInput) -> None:
        self.inp = inp
        info = workflow.info()
        self.state = RevertState(revert_id=info.workflow_id, service=inp.service, to_version=inp.to_version,
                                 requested_by=inp.requested_by, request_reason=inp.reason, evacuate=inp.evacuate,
                                 on_conflict=inp.on_conflict)
        self.controls: Controls[RevertStop] = Controls(
            self.state, noun="revert", terminal=REVERT_TERMINAL, stop_word=lambda stop: stop.status,
            on_cancel=self._cancel_requested)
        self.lock = ServiceLock(info.workflow_id, inp.service, inp.to_version, inp.on_conflict)
        self.release: RolloutRequest | None = None
        self._outbox: list[asyncio.Future[Any]] = []
        self._watchers: list[asyncio.Future[Any]] = []  # notices that wait for a hold to last (queued)

    def _cancel_requested(self) -> None:
        self.controls.halt(RevertStop("aborted", CANCEL_REASON))

    # -- main flow ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: RevertInput) -> RevertState:
        require_own_id(workflow.info().workflow_id, inp.workflow_id, what=f"a revert of {inp.service} to {inp.to_version}")
        self.state.started_at = workflow.now()
        self.controls.audit(inp.requested_by, "revert", None, f"{inp.service} to {inp.to_version}: {inp.reason}")
        self.controls.enter("planning", doing="finding the release to undo")
        self._publish()
        try:
            await self._revert()
        except Stopped:
            pass
        except _Invalid as bad:
            self.controls.halt(RevertStop("invalid", f"refused, nothing was deployed: {bad}"))
        except asyncio.CancelledError:
            self.controls.halt(RevertStop("aborted", CANCEL_REASON))
        except workflow.NondeterminismError:
            raise  # a worker with the right code can still resume this run
        except Exception as err:  # a bug must not wedge the revert or hold the service's lock
            workflow.logger.exception("revert failed unexpectedly")
            self.controls.halt(RevertStop("failed", f"Bifrost internal error ({type(err).__name__}: {err})"))
        await self.lock.release()
        return await self._end()

    async def _revert(self) -> None:
        self._take(await self._find(settled=False))  # refuse a bad input at once, even when it would queue
        self.controls.hold("lock", releases=f"the {self.inp.service} lock (a rollout of {self.inp.service} may be running)")
        self._publish()
        if self.inp.on_conflict == "queue":
            self._watchers.append(asyncio.ensure_future(self._notice_if_queued()))
        acquired = await self.lock.acquire(give_up=lambda: self.controls.stopping, answered=self._lock_answered)
        self.controls.release("lock")
        if not acquired:
            raise Stopped()
        before = self.state.release
        self._take(await self._find(settled=True))  # under the lock: the release cannot change any more
        if self.state.release != before:
            self.controls.audit("bifrost", "release", self.state.release, f"{before} was the latest when the revert "
                                "was asked for; the rollout it waited for ended since, and is the one undone")
        self.controls.enter("reverting", doing="reading every region's version")
        self._publish()
        self._tell(notices.REVERT_STARTED, f"reverting {len(self.state.regions)} stages of {self.state.release} "
                   f"({self.state.release_version}) to {self.inp.to_version}: {self.inp.reason}")
        await self._inventory()
        for wave in sorted({r.wave for r in self.state.regions}, reverse=True):
            await self.controls.wait_unpaused(f"wave {wave}", self._publish)
            rows = [r for r in self.state.regions if r.wave == wave]
            if self.inp.evacuate:  # one traffic change of a service at a time: one region after the other
                for row in rows:
                    await self._one(row)
                    self.controls.raise_if_stopped()
            else:
                await asyncio.gather(*(self._one(row) for row in rows))
            self.controls.raise_if_stopped()

    # -- the release -------------------------------------------------------------------------------
    async def _find(self, *, settled: bool) -> ReleaseFound:
        try:
            found = await workflow.execute_activity_method(
                ReleaseActivities.find_release,
                ReleaseQuery(service=self.inp.service, rollout_id=self.inp.release, settled=settled,
                             to_version=self.inp.to_version),
                summary=f"find the release of {self.inp.service} to undo", **options.RELEASE)
        except ActivityError as err:
            self.controls.halt(RevertStop("failed", f"nothing was deployed: could not read the release to undo "
                                                    f"({error_text(err)})"))
            raise Stopped() from None
        if not found.found:
            problem = found.problem
            if not problem.startswith("release:"):
                problem = f"service: {problem}"
            raise _Invalid(problem)
        return found

    def _take(self, found: ReleaseFound) -> None:
        """Check the input against the release and lay out its stages, last wave first."""
        rid, inp = found.rollout_id, self.inp
        try:
            req = RolloutRequest.model_validate_json(json.dumps(found.request))
        except ValidationError:
            raise _Invalid(f"release: the request of {rid} could not be read; name another with --release") from None
        state: RolloutState | None = None
        if found.state is not None:
            try:
                state = RolloutState.model_validate(found.state)
            except ValidationError:
                state = None
        if state is not None and state.stages:
            stages = [(st.region, st.environment, st.wave, st.version_before) for st in state.stages]
        else:  # a final state without stages (the reader returns no run without a state of its own): its plan says
            try:
                plan = build_plan(req, now=workflow.now())
            except PlanError as err:
                raise _Invalid(f"release: {rid} left no state and its plan cannot be rebuilt ({err})") from None
            stages = [(s.region, s.environment, w.index, None) for w in plan.waves for s in w.stages]
        known = ({v for *_, v in stages if v} | set(found.earlier_versions)) - {req.version}
        keys = [f"{r}/{e}" for r, e, _, _ in stages]
        problems = []
        if inp.to_version == req.version:
            problems.append(f"to_version: {inp.to_version} is the version {rid} rolled out; go back to one it replaced "
                            f"({', '.join(sorted(known)) or 'none known'})")
        elif inp.to_version not in known:
            problems.append(f"to_version: {inp.to_version} is not a version {inp.service} ran before {rid}; versions to "
                            f"go back to: {', '.join(sorted(known)) or 'none known'}")
        unknown = [k for k in inp.stages if k not in keys]
        if unknown:
            problems.append(f"stages: {', '.join(unknown)} not in {rid}; its stages: {', '.join(keys)}")
        if problems:
            raise _Invalid("; ".join(problems))
        self.release = req
        self.state.release, self.state.release_version = rid, req.version
        self.state.known_versions = sorted(known)
        chosen = [(r, e, w) for r, e, w, _ in stages if not inp.stages or f"{r}/{e}" in inp.stages]
        self.state.regions = [RevertRegion(region=r, environment=e, wave=w)
                              for r, e, w in sorted(reversed(chosen), key=lambda s: -s[2])]

    async def _inventory(self) -> None:
        """Read the version every region runs before anything changes (its health is judged on that version)."""

        async def read(row: RevertRegion) -> None:
            row.version_before = row.version_now = await workflow.execute_local_activity_method(
                DeployActivities.current_version, StageOnly(stage=self._ref(row)),
                summary=f"read version in {row.key}", **options.QUICK_LOCAL)

        outcomes = await asyncio.gather(*(read(r) for r in self.state.regions), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            self.controls.halt(RevertStop("failed", f"nothing was deployed: could not read the current versions: "
                                                    f"{error_text(errors[0])}"))
            raise Stopped()

    # -- one region --------------------------------------------------------------------------------
    async def _one(self, row: RevertRegion) -> None:
        """Evacuate (if asked), deploy the version, restore, judge its health against its own window before."""
        v = self.inp.to_version
        if row.version_before == v:
            row.status, row.health = "skipped", f"already on {v}"
            self.controls.audit("bifrost", "skip", row.key, f"already runs {v}")
            self._publish()
            return
        if self.controls.stopping:
            return
        row.started_at = before = workflow.now()
        self.state.current = sorted({*self.state.current, row.key})
        evacuated = None
        if self.inp.evacuate and row.environment == "prod":
            evacuated = await self._evacuate(row)
        row.status = "deploying"
        self._publish()
        try:
            await workflow.execute_activity_method(
                DeployActivities.rollback,
                RollbackInput(stage=self._ref(row), to_version=v, image=self.inp.image,
                              reason=f"revert by {self.inp.requested_by}: {self.inp.reason}"),
                summary=f"revert {row.key} to {v}", **options.ROLLBACK)
        except ActivityError as err:
            row.status, row.version_now = "failed", None
            return self._stop_at(row, f"could not deploy {v} in {row.key}: {error_text(err)}"
                                      + (f"; its traffic is still evacuated ({row.traffic})" if evacuated else ""))
        row.version_now, row.deployed_at = v, workflow.now()
        self.controls.audit("bifrost", "deployed", row.key, f"{row.version_before} → {v}")
        if evacuated is not None and not await self._restore(row, evacuated):
            row.status = "failed"
            return self._stop_at(row, f"{row.key} runs {v} but its traffic did not come back: {row.traffic}")
        await self._check(row, before)

    async def _check(self, row: RevertRegion, before: Any) -> None:
        """Wait out the health window, then judge the region's primary on it against its window just before."""
        assert self.release is not None
        e, canary = self.release.evacuation, self.release.canary
        minutes = self.inp.health_minutes or e.health_check_minutes
        interval = self.inp.health_interval_seconds or e.health_interval_seconds
        window = timedelta(minutes=minutes)
        row.status = "checking"
        self._publish()
        start = workflow.now()
        await workflow.sleep(window, summary=f"health window of {row.key} on {self.inp.to_version}")
        judge: JudgeConfig = canary.judge.model_copy(update={"min_samples": e.min_samples})
        try:
            health = await workflow.execute_activity_method(
                TrafficActivities.check_health,
                HealthInput(service=self.inp.service, environment=row.environment,
                            regions=[RegionHealth(region=row.region, metrics=canary.metrics)],
                            baseline_window=MetricWindow(start=before - window, end=before, interval_seconds=interval),
                            window=MetricWindow(start=start, end=workflow.now(), interval_seconds=interval),
                            judge=judge, look=1, max_looks=1, baseline_version=row.version_before),
                summary=f"health of {self.inp.to_version} in {row.key}", **options.ANALYSIS)
        except ActivityError as err:
            row.status = "failed"
            return self._stop_at(row, f"could not check the health of {row.key}: {error_text(err)}")
        row.health, row.ended_at = health.summary, workflow.now()
        if health.alarm:
            row.status = "unhealthy"
            return self._stop_at(row, f"{row.key} is not healthy on {self.inp.to_version} against its own window "
                                      f"before the revert: {health.summary}")
        row.status = "reverted"
        self.state.current = [k for k in self.state.current if k != row.key]
        self.controls.audit("bifrost", "healthy", row.key, health.summary)
        self._publish()

    def _stop_at(self, row: RevertRegion, why: str) -> None:
        """Stop before the next region, saying what is left on the release's version."""
        left = [r.key for r in self.state.regions if r.status == "pending"]
        rest = (f"; not reverted yet (still on {self.state.release_version}): {', '.join(left)}" if left
                else "; every other region was reverted")
        self.controls.audit("bifrost", "stop", row.key, why)
        self.controls.halt(RevertStop("failed", f"stopped at {row.key}: {why}{rest}"))
        self._publish()

    # -- traffic: evacuate a production region first, bring its traffic back after the deploy --------
    async def _traffic(self, move: EvacuationInput, key: str) -> tuple[EvacuationState | None, str]:
        """Run an evacuation or restore as a child workflow; its state (or None) and one line on how it ended."""
        run = await run_traffic_change(move, summary=f"{move.direction} {move.region} for {self.inp.service} (revert of {key})")
        return run.state, run.line

    async def _evacuate(self, row: RevertRegion) -> EvacuationState | None:
        assert self.release is not None
        row.status = "evacuating"
        self._publish()
        move = EvacuationInput.for_stage(
            self.release.evacuation, self.release.canary.judge, service=self.inp.service, region=row.region,
            environment=row.environment, reason=f"revert of {row.key} to {self.inp.to_version}: {self.inp.reason}",
        ).model_copy(update={"requested_by": self.inp.requested_by})
        state, how = await self._traffic(move, row.key)
        if state is not None and state.status == "evacuated":
            row.traffic = f"evacuated (weights {state.weights_before} → {state.weights_now})"
            return state
        row.traffic = f"{how}; reverted without evacuating"
        self.controls.audit("bifrost", "not-evacuated", row.key, how)
        return None

    async def _restore(self, row: RevertRegion, evacuated: EvacuationState) -> bool:
        row.status = "restoring_traffic"
        self._publish()
        restore = evacuated.restore_input(requested_by=self.inp.requested_by,
                                          reason=f"{self.inp.to_version} deployed in {row.key} (revert)")
        state, how = await self._traffic(restore, row.key)
        if state is not None and state.status == "restored":
            row.traffic += f"; restored (weights {state.weights_now})"
            return True
        row.traffic += f"; {how}; restore it with `bifrost restore {row.region} --service {self.inp.service}`"
        return False

    # -- the end -----------------------------------------------------------------------------------
    async def _end(self) -> RevertState:
        stop = self.controls.stop
        if stop is not None and stop.reason == CANCEL_REASON:
            # who sent the request, in the reason and the audit trail
            stop = self.controls.stop = RevertStop("aborted", await name_canceller(self.controls))
        status, reason = (stop.status, stop.reason) if stop is not None else (
            "reverted", f"{self.inp.service} is back on {self.inp.to_version} in every stage of {self.state.release}")
        self.state.reason, self.state.ended_at, self.state.current = reason, workflow.now(), []
        self.controls.audit("bifrost", status, None, reason)
        self.controls.enter(status)
        self._publish()
        if status == "reverted":
            self._tell(notices.REVERT_FINISHED, reason)
        elif status in ("failed", "aborted") and self._changed():
            self._tell(notices.REVERT_FAILED, f"{status}: {reason}")
        await asyncio.gather(*self._watchers, return_exceptions=True)  # each ends once the lock is not held
        await asyncio.gather(*self._outbox, return_exceptions=True)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if status == "aborted":
            await end_canceled(self.state, "revert")  # Canceled, its state in the memo (returns if it cannot)
        if status != "reverted":
            raise ApplicationError(f"revert {status}: {reason}", self.state, type=FAILURE_TYPES[status], non_retryable=True)
        return self.state

    def _changed(self) -> bool:
        return any(r.status != "pending" for r in self.state.regions)

    # -- plumbing ----------------------------------------------------------------------------------
    def _ref(self, row: RevertRegion) -> StageRef:
        return StageRef(service=self.inp.service, region=row.region, environment=row.environment)

    def _tell(self, event: str, text: str) -> None:
        """Tell people (chat webhooks) without waiting: a notice never delays or fails the revert."""
        self._tell_notice(notices.revert(revert_id=self.state.revert_id, service=self.inp.service,
                                         version=self.inp.to_version, event=event, text=text,
                                         stages=[r.key for r in self.state.regions]))

    def _tell_notice(self, n: Notification) -> None:
        self._outbox.append(asyncio.ensure_future(workflow.execute_activity_method(
            NotifyActivities.notify, n, summary=f"notify {n.event}", **options.NOTIFY)))

    def _waiting_for_lock(self) -> bool:
        return self.controls.held("lock") is not None and not self.controls.stopping

    async def _notice_if_queued(self) -> None:
        """Tell people the revert waits behind a running rollout (named by the lock), if the lock is not granted soon."""
        try:
            await workflow.wait_condition(lambda: not self._waiting_for_lock(), timeout=QUEUED_NOTICE_AFTER,
                                          timeout_summary="notice if still queued")
            return
        except TimeoutError:
            pass
        ahead = await self.lock.holder()
        if not self._waiting_for_lock():  # granted (or stopped) while the lock was asked
            return
        behind = ahead or f"a running {self.inp.service} rollout"
        self.controls.hold("lock", releases=f"the {self.inp.service} lock, held by {behind}")
        self.controls.audit("bifrost", "queued", None, f"behind {behind}; starts when it ends")
        self._publish()
        self._tell_notice(notices.revert_queued(revert_id=self.state.revert_id, service=self.inp.service,
                                                version=self.inp.to_version, waits_for=ahead))

    def _publish(self) -> None:
        st = self.state
        envs = {r.environment for r in st.regions if r.key in st.current}
        self.controls.publish([
            search.SERVICE.value_set(st.service),
            search.VERSION.value_set(st.to_version),
            search.STATUS.value_set(st.status),
            search.STAGE.value_set(", ".join(st.current) or "-"),
            search.ENVIRONMENT.value_set("prod" if "prod" in envs else "test" if envs else "-"),
            search.REQUESTED_BY.value_set(st.requested_by),
        ], revert_details(st))

    # -- the lock ----------------------------------------------------------------------------------
    @workflow.signal(name=GRANTED_SIGNAL, description="Internal: the service lock is ours (confirmed with the lock).")
    async def lock_granted(self, service: str) -> None:
        why = await self.lock.confirm_grant()
        self.controls.audit("bifrost", f"ignored {GRANTED_SIGNAL}" if why else "lock-granted", None,
                            why or f"{self.inp.service} lock acquired")

    @workflow.signal(name=REFUSED_SIGNAL, description="Internal: the service lock was refused (a rollout runs; confirmed with the lock).")
    async def lock_refused(self, reason: str) -> None:
        confirmed, why = await self.lock.confirm_refusal()
        if confirmed is None:
            self.controls.audit("bifrost", f"ignored {REFUSED_SIGNAL}", None, why)
        else:
            self._refused(confirmed)

    @workflow.signal(name=SUPERSEDED_SIGNAL, description="Internal: a rollout superseded this revert (confirmed with the lock).")
    async def superseded(self, version: str) -> None:
        if self.controls.stopping or self.controls.finished:
            return
        confirmed, why = await self.lock.confirm_supersession()
        if confirmed is None:
            self.controls.audit("bifrost", f"ignored {SUPERSEDED_SIGNAL}", None, why)
        else:
            self._superseded(confirmed)

    def _refused(self, reason: str) -> None:
        self.controls.halt(RevertStop("rejected", f"not started, nothing was deployed: {reason}; revert once it has "
                                                  "ended, or ask again with --queue to wait for it"))

    def _superseded(self, version: str) -> None:
        self.controls.audit("bifrost", "superseded", None, f"by {self.inp.service} {version}")
        self.controls.halt(RevertStop("aborted", f"superseded by a rollout of {self.inp.service} {version} "
                                                 "(on_conflict: supersede); stopped before the next region"))

    def _lock_answered(self, answer: LockAnswer) -> None:
        kind, detail = answer
        if kind == "granted":
            self.controls.audit("bifrost", "lock-granted", None, f"{self.inp.service} lock acquired (found by re-checking)")
        elif kind == "refused":
            self._refused(detail)
        elif not self.controls.stopping:
            self._superseded(detail)

    # -- queries and updates ----------------------------------------------------------------------
    @workflow.query(description="Everything: the release undone, each region's versions, health and traffic, the audit trail.")
    def status(self) -> RevertState:
        return self.state

    @workflow.query(name=LOCK_CLAIM_QUERY, description="Internal: this revert's service-lock request and where it stands.")
    def lock_claim(self) -> LockClaim:
        return self.lock.claim()

    pause, resume = pause_updates(
        holds_at="before the next wave",
        pause='Hold before the next wave (the region in progress finishes). JSON: {"by": "alice", "reason": "why"}.',
        resume='Continue a paused revert. JSON: {"by": "alice"}.')

    def _abort(self, req: Abort) -> str:
        self.controls.audit(req.by, "abort", None, req.reason)
        self.controls.halt(RevertStop("aborted", f"aborted by {req.by}: {req.reason}"))
        return "aborting: stops before the next region"

    abort = stop_update(Abort, _abort, description='Stop before the next region; regions already reverted stay '
                        'reverted. JSON: {"by": "alice", "reason": "why"}.')


def revert_details(st: RevertState) -> str:
    """The UI's Current Details: the release undone, each region (last wave first), what it waits for, the audit."""
    lines = [f"**revert** {md(st.service)} → `{md(st.to_version)}` — **{st.status}**",
             f"undoes {md(st.release or '?')} ({md(st.release_version or '?')}); asked by {md(st.requested_by)}: "
             f"{md(st.request_reason)}" + (" (evacuating production regions)" if st.evacuate else "")]
    if st.waiting_for:
        lines.append(f"waiting for: {md(st.waiting_for)}")
    if st.reason:
        lines.append(f"reason: {md(st.reason)}")
    if st.regions:
        lines += ["", "| stage | wave | status | before → now | health | traffic |", "|---|---|---|---|---|---|"]
        lines += [f"| {md(r.key)} | {r.wave} | {r.status} | {md(r.version_before or '?')} → {md(r.version_now or '?')} | "
                  f"{md(r.health) or '–'} | {md(r.traffic) or '–'} |" for r in st.regions]
    if st.status not in REVERT_TERMINAL:
        lines += ["", 'Act: More actions → Update → `pause` / `resume` / `abort` with {"by": "<your name>", "reason": "..."}']
    if st.audit:
        lines += ["", "last actions:"]
        lines += [f"- {a.at:%H:%M:%S} {md(a.who)}: {md(a.action)} {md(a.target or '')} {md(a.detail)}".rstrip()
                  for a in st.audit[-AUDIT_LINES:]]
    return "\n".join(lines)
