"""What the parent rollout told this stage, and how a stage trusts its internal signals.

Anyone may send the stage's signals by hand, so each is only a poke: the stage asks its rollout what it ordered
(the rollout's `stage_orders` query, which only the rollout's validated updates and its own code change) and acts
on that answer, never on the signal's payload. A signal the rollout did not order is ignored and leaves one line
in the stage's audit (its `progress` query). See docs/security.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.errors import error_text
from activities.peers import PeerActivities, PeerQuery
from common.namespaces import home_namespace
from workflows import options
from workflows.controls import audit_entry
from workflows.stage.context import StageContext
from workflows.stage.models import HoldDecision, StageConclusion, StageOrders

STAGE_ORDERS_QUERY = "__bifrost_stage_orders"  # the rollout's record of what it told its stages; `__`: listed last in the UI

Check = Callable[[StageOrders], str]  # why a signal does not fit the rollout's orders ('' when it does)


class Orders:
    """The rollout's orders as this stage last confirmed them: hold, stop, skip the soak, its verdict, a hold's
    decision. Signals only poke `confirm`; the orders themselves come from the rollout's query."""

    def __init__(self, stage: StageContext) -> None:
        self.stage = stage
        self.conclusion: StageConclusion | None = None
        self.decision: HoldDecision | None = None  # the rollout's decision on the current hold on failure
        self._confirming = asyncio.Lock()
        self._pokes: list[tuple[str, Check]] = []

    # -- the checks: what each signal claims, against what the rollout ordered ---------------------------
    @staticmethod
    def hold_fits(hold: bool) -> Check:
        return lambda o: "" if o.hold == hold else f"the rollout is {'paused' if o.hold else 'not paused'}"

    def skip_soak_fits(self) -> Check:
        return lambda o: "" if self.stage.key in o.skip_soak else \
            "the rollout has not ended this stage's soak (only its skip_soak update can)"

    def stop_fits(self) -> Check:
        return lambda o: "" if self.stage.key in o.stop else "the rollout has not stopped this stage"

    def conclude_fits(self, conclusion: StageConclusion) -> Check:
        def fits(o: StageOrders) -> str:
            given = o.conclude.get(self.stage.key)
            if given is None:
                return "the rollout has given no verdict on this stage"
            return "" if given.action == conclusion.action else f"the rollout's verdict on this stage is {given.action}"

        return fits

    def resolve_fits(self, decision: HoldDecision) -> Check:
        def fits(o: StageOrders) -> str:
            given = o.resolve.get(self.stage.key)
            if given is None or given.hold != self.stage.state.holds:
                return "the rollout has not decided on this stage's hold (only its resolve_hold update can)"
            return "" if given.action == decision.action else f"the rollout's decision on this hold is {given.action}"

        return fits

    # -- confirming ------------------------------------------------------------------------------------------
    async def confirm(self, signal: str, fits: Check) -> None:
        """Ask the rollout what it ordered, obey that (not the signal), and note each signal that did not fit."""
        self._pokes.append((signal, fits))
        async with self._confirming:  # one question at a time; it answers every poke that came meanwhile
            pokes, self._pokes = self._pokes, []
            if not pokes:
                return
            orders, why = await self.ask()
            if orders is not None:
                self.obey(orders)
            for name, check in pokes:
                problem = why if orders is None else check(orders)
                if problem:
                    self.stage.detail.audit.append(audit_entry("bifrost", f"ignored {name}", self.stage.key, problem))

    def obey(self, orders: StageOrders) -> None:
        key, detail = self.stage.key, self.stage.detail
        detail.hold = orders.hold
        if key in orders.stop:
            self.stage.set_stop(orders.stop[key])
        if key in orders.skip_soak and detail.skip_soak_reason is None:
            detail.skip_soak_reason = orders.skip_soak[key] or "skipped"
        if key in orders.conclude and self.conclusion is None:
            self.conclusion = orders.conclude[key]
        decided = orders.resolve.get(key)
        if decided is not None and decided.hold == self.stage.state.holds and self.decision is None:
            self.decision = decided

    async def ask(self) -> tuple[StageOrders | None, str]:
        """The rollout's record of what it told its stages, or None and why it could not be had."""
        rollout = self.stage.inp.rollout_id  # the stage ran only once its rollout's history proved it (origin.py)
        try:
            answer = await workflow.execute_activity_method(
                PeerActivities.query_workflow, PeerQuery(workflow_id=rollout, query=STAGE_ORDERS_QUERY,
                                                         namespace=home_namespace(workflow.info().namespace)),
                summary=f"confirm with {rollout}", **options.CONFIRM)
        except ActivityError as err:
            return None, f"the rollout {rollout} could not be asked ({error_text(err)})"
        if not answer.found or answer.error is not None:
            return None, (f"the rollout {rollout} does not exist" if not answer.found
                          else f"the rollout {rollout} did not answer ({answer.error})")
        try:
            return StageOrders.model_validate(answer.answer), ""
        except ValidationError:
            return None, f"the rollout {rollout} answered with something else than its orders"
