"""Where a wave waits for approval: the request's gates, the `approval` hold, reminders, the timeout, and the
approve and reject updates that answer it."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from common import notices
    from common.types import Notification
    from workflows.plan import Wave
    from workflows.rollout.context import Rollout
    from workflows.rollout.models import Stop
    from workflows.rollout.updates import Ack, Approve, Reject, refused


class Gates:
    """A wave's approval gates: held until every pending gate is approved, rejected, or times out."""

    def __init__(self, rollout: Rollout) -> None:
        self.r = rollout

    def of(self, wave: Wave) -> list[str]:
        """The gates that hold `wave`: by its index, or by one of its stages."""
        keys = {s.key for s in wave.stages}
        return [g.key for g in self.r.req.approvals.gates if g.wave == wave.index or (g.stage in keys)]

    async def wait(self, wave: Wave) -> bool:
        """Hold before `wave` until its pending gates are approved; reject the rollout if nobody answers in time.
        True if it held (the caller then honours a pause asked meanwhile)."""
        r = self.r
        pending = [g for g in self.of(wave) if g not in r.state.approved]
        if not pending:
            return False
        hours = r.req.approvals.timeout_hours
        timeout = timedelta(hours=hours)
        times_out_at = workflow.now() + timeout
        r.approval.hold("approval", releases=f"approval of wave {wave.index} (gates: {', '.join(pending)})",
                        until=times_out_at, then="the rollout is rejected and rolls back",
                        targets=[s.key for s in wave.stages], wave=wave.index, gates=pending)
        r.publish()
        r.outbox.watch(self._remind(wave, pending, times_out_at))
        try:
            await workflow.wait_condition(
                lambda: r.controls.held("approval") is None or r.stop is not None,
                timeout=timeout, timeout_summary=f"approval timeout for wave {wave.index}",
            )
        except TimeoutError:
            names = ", ".join(r.state.pending_approvals)
            r.audit("bifrost", "approval-timeout", f"wave-{wave.index}", f"no answer within {hours:g} h")
            r.halt(Stop("rejected", f"approval of wave {wave.index} ({names}) timed out after {hours:g} h"))
        r.controls.release("approval")
        r.controls.raise_if_stopped()
        r.publish()
        return True

    async def _remind(self, wave: Wave, gates: list[str], times_out_at: datetime) -> None:
        """approval_pending now, then a bounded number of reminders while the same gates still wait."""
        r, a = self.r, self.r.req.approvals
        stages = [s.key for s in wave.stages]

        def notice(reminder: int) -> Notification:
            left = max(a.max_reminders - reminder, 0) if a.remind_every_minutes else None
            return notices.approval_pending(**r.outbox.about, wave=wave.index, gates=gates, stages=stages,
                                            approvers=list(a.approvers), times_out_at=times_out_at,
                                            reminder=reminder, reminders_left=left)

        def answered() -> bool:
            return r.state.awaiting_wave != wave.index or not r.state.pending_approvals or r.stop is not None

        r.outbox.send(notice(0))
        if not a.remind_every_minutes:
            return
        for reminder in range(1, a.max_reminders + 1):
            every = timedelta(minutes=a.remind_every_minutes)
            if times_out_at - workflow.now() <= every:
                return  # the gate times out first: its rejection is the next thing people hear
            try:
                await workflow.wait_condition(answered, timeout=every, timeout_summary=f"approval reminder {reminder}")
                return
            except TimeoutError:
                if answered():
                    return
                r.outbox.send(notice(reminder))

    # -- the approve and reject updates ------------------------------------------------------------
    def waiting_wave(self, stage: str | None, wave: int | None) -> int:
        """The wave an approval names, directly or through one of its stages; it must be the one waiting."""
        state = self.r.state
        waiting = state.awaiting_wave
        if waiting is None:
            raise refused("no approval is pending; the rollout is not waiting at a gate")
        if stage is not None:
            st = state.stage(stage)
            if st is None:
                raise refused(f"unknown stage {stage!r}; stages: {', '.join(s.key for s in state.stages)}")
            wave = st.wave
        if wave != waiting:
            keys = ", ".join(st.key for st in state.wave_stages(waiting))
            raise refused(f"wave {wave} is not waiting for approval; wave {waiting} is ({keys})")
        return waiting

    def check(self, req: Approve | Reject) -> None:
        """approve's and reject's validator: a running rollout, an approver, the wave waiting at its gate."""
        self.r.approval.check(req.approver)
        self.waiting_wave(req.stage, req.wave)

    def approve(self, req: Approve) -> Ack:
        r = self.r
        wave = self.waiting_wave(req.stage, req.wave)
        gates = list(r.state.pending_approvals)
        r.state.approved.extend(gates)
        r.approval.decided(req.approver, "approve", f"wave-{wave}", req.comment, release="approval")
        return Ack(message=f"approved wave {wave} ({', '.join(gates)}) by {req.approver}")

    def reject(self, req: Reject) -> Ack:
        r = self.r
        wave = self.waiting_wave(req.stage, req.wave)
        r.approval.decided(req.approver, "reject", f"wave-{wave}", req.reason, release="approval")
        r.halt(Stop("rejected", f"wave {wave} rejected by {req.approver}: {req.reason}"))
        return Ack(message=f"rejected wave {wave}; rolling back")
