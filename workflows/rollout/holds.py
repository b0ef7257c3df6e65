"""Stages held on failure (on_failure: hold): how the rollout holds with them and how a hold ends.

A stage that fails with `on_failure: hold` keeps its canary and baseline and says so (confirmed by its own
answer, workflows/rollout/progress.py). The rollout then holds under a `failure` hold: the other stages are told to
hold before promotion, people are told, and the hold times out into the request's `hold.on_timeout` unless a
release manager decides first (`resolve_hold`: retry, promote or rollback).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from common import notices
    from workflows.request import duration
    from workflows.rollout.context import Rollout
    from workflows.rollout.updates import Ack, ResolveHold, refused
    from workflows.stage.models import HoldAction, HoldDecision
    from workflows.stage.workflow import StageWorkflow

DONE = {"retry": "judged again on a fresh window", "promote": "promoted", "rollback": "rolled back"}


class Holds:
    """The stages held on failure, the rollout's `failure` hold over them, and the decisions that end each."""

    def __init__(self, rollout: Rollout) -> None:
        self.r = rollout
        self.held: dict[str, datetime] = {}  # stages held on failure -> when their hold times out
        self._seen: set[tuple[str, int]] = set()  # (stage, n-th hold) the rollout has placed a hold for

    def stages_hold(self) -> bool:
        """Whether stages must hold before promotion: the rollout is paused, or a stage is held on failure."""
        return self.r.controls.paused is not None or self.r.controls.held("failure") is not None

    def tell_stages(self) -> None:
        """Tell every running stage whether to hold before promotion (each confirms with `stage_orders`)."""
        hold = self.stages_hold()
        for key in self.r.running():
            self.r.signal_stage(key, StageWorkflow.set_hold, hold)

    def _place(self) -> None:
        """The `failure` hold over the stages held now (released when none is)."""
        r = self.r
        if not self.held:
            r.controls.release("failure")
            return
        keys = sorted(self.held)
        rows = [r.row(k) for k in keys]
        h = r.controls.held("failure")
        since = h.since if h is not None else workflow.now()
        r.approval.hold("failure", releases=f"resolve_hold on {', '.join(keys)}: retry, promote or rollback",
                        until=min(self.held.values()), then=f"{r.req.hold.on_timeout} (the request's hold.on_timeout)",
                        why="; ".join(f"{row.key}: {row.reason}" for row in rows), targets=keys, wave=rows[0].wave)
        held = r.controls.held("failure")
        assert held is not None
        held.since = since

    def stage_held(self, key: str) -> None:
        """A stage says (confirmed by its own answer) it holds on failure: hold the rollout, tell people, time it."""
        r = self.r
        row = r.row(key)
        if (key, row.holds) in self._seen or key in r.orders.stop:
            return
        self._seen.add((key, row.holds))
        timeout = timedelta(minutes=r.req.hold.timeout_minutes)
        self.held[key] = workflow.now() + timeout
        self._place()
        r.audit("bifrost", "hold", key, row.reason)
        self.tell_stages()
        r.outbox.watch(self._times_out(key, row.holds, timeout))
        r.outbox.send(notices.held(**r.outbox.about, stage=key, wave=row.wave, reason=row.reason,
                            approvers=list(r.req.approvals.approvers), times_out_at=self.held[key],
                            on_timeout=r.req.hold.on_timeout))

    def unhold(self, key: str) -> None:
        """Stage `key` no longer holds on failure (decided, stopped or ended)."""
        if self.held.pop(key, None) is not None:
            self._place()
            if self.r.controls.held("failure") is None:
                self.tell_stages()

    def resolve(self, key: str, action: HoldAction, by: str, reason: str) -> None:
        """Record the decision on stage `key`'s hold (what the stage confirms against), then tell the stage."""
        r = self.r
        decision = HoldDecision(hold=r.row(key).holds, action=action, by=by, reason=reason)
        r.orders.resolve[key] = decision
        r.audit(by, f"hold-{action}", key, reason)
        self.unhold(key)
        r.signal_stage(key, StageWorkflow.resolve, decision)
        r.publish()

    async def _times_out(self, key: str, hold: int, timeout: timedelta) -> None:
        """The hold of stage `key` takes the request's default action (hold.on_timeout) if nobody decides in time."""
        r = self.r

        def over() -> bool:
            decided = r.orders.resolve.get(key)
            return (decided is not None and decided.hold >= hold) or key not in self.held or r.stop is not None

        try:
            await workflow.wait_condition(over, timeout=timeout, timeout_summary=f"hold of {key} times out")
        except TimeoutError:
            if not over():
                action = r.req.hold.on_timeout
                minutes = r.req.hold.timeout_minutes
                why = f"no decision within {minutes:g} min: the request's hold.on_timeout ({action})"
                if action == "promote":
                    why = self._failed_promotion(key, minutes, why)
                self.resolve(key, action, "bifrost", why)

    def _failed_promotion(self, key: str, minutes: float, why: str) -> str:
        """A hold that times out into promote ships a canary judged to fail: say so in the audit, and tell people
        at once as urgent."""
        row = self.r.row(key)
        score = f"{row.score:g}" if row.score is not None else "none"
        line = (f"promoted a FAILED canary (score {score}, verdict {row.verdict or 'none'}) because the hold timed out "
                f"after {duration(minutes)}; {why}")
        self.r.outbox.send(notices.promoted_on_timeout(**self.r.outbox.about, stage=key, wave=row.wave, text=line))
        return line

    # -- the resolve_hold update -------------------------------------------------------------------
    def check_decision(self, req: ResolveHold) -> None:
        """resolve_hold's validator: a running rollout, an approver, a stage held on failure now."""
        self.r.approval.check(req.by, field="by")
        self.r.check_stage(req.stage)
        if req.stage not in self.held:
            held = ", ".join(sorted(self.held)) or "none"
            raise refused(f"stage: {req.stage} is not held on failure; held now: {held}")

    def decide(self, req: ResolveHold) -> Ack:
        self.resolve(req.stage, req.action, req.by, req.reason)
        return Ack(message=f"{req.stage} will be {DONE[req.action]} ({req.action} by {req.by})")
