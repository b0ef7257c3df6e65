"""How a rollout starts, before its first wave: its plan and the request's checks, its place in the queue for the
service's lock (whose signals LockHolder takes: workflows/controls/lock_client.py), and the versions every stage runs
before anything changes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import NoReturn

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import StageOnly
    from activities.policy import PolicyActivities
    from activities.routing import RouterCheck, RoutingActivities
    from common import notices
    from common.types import INVALID_REQUEST, StageRef
    from workflows import options
    from workflows.controls import Stopped
    from workflows.controls.lock_client import LockAnswer, ServiceLock
    from workflows.plan import Plan, PlanError, Stage, build_plan
    from workflows.request import RolloutRequest, promote_hold_floor_problem, promoting_holds
    from workflows.rollout.context import Rollout
    from workflows.rollout.models import Stop, lock_releases
    from workflows.stage.models import StageState

QUEUED_NOTICE_AFTER = timedelta(seconds=10)  # a lock not granted by then: another rollout holds it


async def hold_floor_problem(request: RolloutRequest) -> str | None:
    """Why the request's holds may not promote on timeout this soon, by the floor in the worker's own targets
    file (an activity: a hand-started run chooses its input, not the worker's file). Only a request whose holds
    promote on timeout asks, so every other rollout's commands are as they were."""
    if not promoting_holds(request):
        return None
    try:
        floor: float = await workflow.execute_activity_method(
            PolicyActivities.promote_hold_floor, summary="the platform's floor on hold.timeout_minutes", **options.QUICK)
    except ActivityError as err:
        return (f"hold.on_timeout: promote needs the platform's floor on hold.timeout_minutes, which could not be "
                f"read ({error_text(err)})")
    return promote_hold_floor_problem(request, floor)


async def router_problems(request: RolloutRequest, plan: Plan) -> list[str]:
    """Stages whose targets do not configure the request's `canary.traffic.router`, asked of the worker's targets
    file before anything is deployed. Only a weighted request asks, so every other rollout's commands are as
    they were."""
    if request.canary.traffic is None:
        return []
    check = RouterCheck(service=request.service, stages=[(s.region, s.environment) for s in plan.stages()],
                        kind=request.canary.traffic.router)
    try:
        problems: list[str] = await workflow.execute_activity_method(
            RoutingActivities.canary_router_problems, check, summary="the canary router of every stage", **options.QUICK)
    except ActivityError as err:
        return [f"canary.traffic.router: the worker's targets file could not be read ({error_text(err)})"]
    return problems


class Start:
    """The rollout's plan, its turn at the service's lock, and the versions before it."""

    def __init__(self, rollout: Rollout, lock: ServiceLock, *, answered: Callable[[LockAnswer], None]) -> None:
        self.r = rollout
        self.lock = lock
        self._answered = answered  # what a re-check of the lock found (LockHolder._lock_answered)

    async def plan(self, request: RolloutRequest) -> Plan:
        """The plan of a valid request, its stages' rows, the submit audit line; an invalid request fails the run."""
        r = self.r
        r.state.started_at = workflow.now()
        try:
            r.plan = plan = build_plan(request, now=workflow.now())
        except PlanError as err:
            self._invalid(f"invalid plan: {err}")
        problem = await hold_floor_problem(request)
        if problem is not None:
            self._invalid(f"invalid request: {problem}")
        routers = await router_problems(request, plan)
        if routers:
            self._invalid("invalid request: " + "; ".join(routers))
        r.state.waves = len(plan.waves)
        r.state.stages = [StageState.of(s.region, s.environment, w.index) for w in plan.waves for s in w.stages]
        r.audit(request.requested_by, "submit", None, f"{request.service} {request.version}")
        return plan

    def _invalid(self, reason: str) -> NoReturn:
        """Fail the run at once as InvalidRequest, its state (phase `failed`, the reason) in the failure."""
        self.r.enter("failed", reason=reason)
        raise ApplicationError(reason, self.r.state, type=INVALID_REQUEST, non_retryable=True) from None

    async def queue(self, plan: Plan) -> None:
        """Wait for the service's lock (people are told if another rollout holds it); raises Stopped if refused
        or stopped meanwhile."""
        r = self.r
        r.state.phase = "running"
        r.controls.hold("lock", releases=lock_releases(r.req.service))
        r.publish()
        r.outbox.watch(self._notice_if_queued())
        acquired = await self.lock.acquire(give_up=lambda: r.controls.stopping, answered=self._answered)
        r.controls.release("lock")
        if not acquired:
            raise Stopped()
        r.publish()
        r.outbox.tell("rollout_started", f"rolling out across {len(plan.waves)} waves")

    async def _notice_if_queued(self) -> None:
        """Tell people the rollout waits behind another one, if the lock is not granted soon."""
        r = self.r
        try:
            await workflow.wait_condition(lambda: r.controls.held("lock") is None or r.stop is not None,
                                          timeout=QUEUED_NOTICE_AFTER, timeout_summary="notice if still queued")
        except TimeoutError:
            r.outbox.send(notices.queued(**r.outbox.about))

    # -- before anything changes -------------------------------------------------------------------
    async def inventory(self, plan: Plan) -> None:
        """Record which version every stage runs before anything changes."""
        r = self.r

        async def read(s: Stage) -> None:
            v = await workflow.execute_local_activity_method(
                DeployActivities.current_version,
                StageOnly(stage=StageRef(service=r.req.service, region=s.region, environment=s.environment)),
                summary=f"read version in {s.key}", **options.QUICK_LOCAL,
            )
            st = r.row(s.key)
            st.version_before = st.version_now = v

        outcomes = await asyncio.gather(*(read(s) for s in plan.stages()), return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            r.halt(Stop("failed", f"nothing was deployed: could not read the current versions: {error_text(errors[0])}",
                        "stage"))
            raise Stopped()
