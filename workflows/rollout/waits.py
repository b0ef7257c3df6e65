"""What a wave waits for before it starts: a pause, its approval gates (gates.py), its regions' deployment windows,
and its regions' traffic; and the updates that release a wait early (pause/resume, override_window)."""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from common import notices
    from common.types import EnvKind
    from workflows.clock import MIN_WINDOW_WAIT, wait_until
    from workflows.plan import Wave
    from workflows.rollout.context import Rollout
    from workflows.rollout.details import holds_at, waiting_window
    from workflows.rollout.gates import Gates
    from workflows.rollout.holds import Holds
    from workflows.rollout.updates import Ack, OverrideWindow, Pause, Resume, refused
    from workflows.stage.workflow import StageWorkflow
    from workflows.traffic_gate import traffic_facts
    from workflows.windows import next_open


class Waits:
    """The safe point before each wave, and the pause and window updates that act on it."""

    def __init__(self, rollout: Rollout, gates: Gates, holds: Holds) -> None:
        self.r = rollout
        self.gates = gates
        self.holds = holds
        self._window_noticed: set[str] = set()  # the closed windows people were last told about

    async def before_wave(self, wave: Wave) -> None:
        """Safe point: honour pause, approval gates, deployment windows and traffic before a wave starts."""
        await self.unpaused(f"wave {wave.index}")
        if self._already_done(wave):
            self.r.audit("bifrost", "wave-already-done", f"wave-{wave.index}",
                         f"every stage already runs {self.r.req.version}: no gate or window to wait for")
            return
        if await self.gates.wait(wave):
            await self.unpaused(f"wave {wave.index}")
        await self._windows(wave)
        while await self._traffic(wave):  # it held: a deployment window may have closed meanwhile
            await self._windows(wave)

    def _already_done(self, wave: Wave) -> bool:
        """Every stage of the wave ran the new version when the rollout read them (a resubmission after a failure):
        a wave that changes nothing asks no gate or window again (its stages end `skipped`)."""
        rows = [self.r.state.stage(s.key) for s in wave.stages]
        return all(st is not None and st.version_before == self.r.req.version for st in rows)

    async def unpaused(self, where: str) -> None:
        """A safe point: hold here while paused (people are told where); raises Stopped once stopped."""
        r = self.r

        def held() -> None:
            r.publish()
            p = r.controls.paused
            assert p is not None
            r.outbox.send(notices.paused(**r.outbox.about, by=p.by, reason=p.why, where=where))

        if await r.controls.wait_unpaused(where, held):
            r.publish()

    async def _windows(self, wave: Wave) -> None:
        """Hold the wave while a stage's deployment window is closed (and not overridden)."""
        r = self.r
        regions = {reg.name: reg for reg in r.req.regions}
        while True:
            now = workflow.now()
            closed: dict[str, datetime | None] = {}
            for s in wave.stages:
                if s.key in r.state.window_overrides:
                    continue
                opens = next_open(regions[s.region], now)
                if opens != now:
                    closed[s.key] = opens
            if not closed:
                return
            known = [t for t in closed.values() if t is not None]
            until = min(known) if known else None
            when = f"{until:%Y-%m-%d %H:%M} UTC" if until is not None else "never (freeze dates cover 400 days)"
            r.controls.hold("window", releases=f"deployment window of {', '.join(sorted(closed))} (opens {when})",
                            targets=sorted(closed))
            r.publish()
            if set(closed) != self._window_noticed:
                self._window_noticed = set(closed)
                r.outbox.send(notices.window_closed(**r.outbox.about, wave=wave.index, stages=sorted(closed), opens_at=until))
            overrides = len(r.state.window_overrides)
            try:
                await workflow.wait_condition(
                    lambda n=overrides: len(r.state.window_overrides) != n or r.stop is not None,  # type: ignore[misc]
                    timeout=wait_until(until, now, at_least=MIN_WINDOW_WAIT) if until is not None else None,
                    timeout_summary=f"window opens for {', '.join(sorted(closed))}",
                )
            except TimeoutError:
                pass
            r.controls.release("window")  # placed again below while a window is still closed
            r.controls.raise_if_stopped()
            await self.unpaused(f"wave {wave.index}")
            r.publish()

    async def _traffic(self, wave: Wave) -> bool:
        """Hold the wave while a region it deploys to has its traffic evacuated or moving: a canary there would be
        judged on no users, or on two regimes (workflows/traffic_gate.py; read from the truth, never a message).
        True if it held."""
        r = self.r
        regions: dict[EnvKind, set[str]] = {}
        for s in wave.stages:
            regions.setdefault(s.environment, set()).add(s.region)
        while True:
            blocked: dict[str, str] = {}
            for env, names in sorted(regions.items()):
                facts = await traffic_facts(r.req.service, env, sorted(names))
                blocked.update({s.key: why for s in wave.stages if s.environment == env and (why := facts.why_not(s.region))})
            held = r.controls.held("traffic")
            if not blocked:
                if held is not None:
                    r.controls.release("traffic")
                    r.audit("bifrost", "traffic-back", f"wave-{wave.index}", "its regions serve again: the wave goes on")
                    r.publish()
                return held is not None
            releases = "traffic back: " + "; ".join(dict.fromkeys(blocked[k] for k in sorted(blocked)))
            if held is None or held.releases != releases:
                if held is None:
                    r.audit("bifrost", "traffic-hold", f"wave-{wave.index}", releases)
                r.controls.hold("traffic", releases=releases, targets=sorted(blocked), at=f"before wave {wave.index}")
                r.publish()
            try:
                await workflow.wait_condition(lambda: r.stop is not None,
                                              timeout=timedelta(seconds=r.req.traffic_recheck_seconds),
                                              timeout_summary=f"read the traffic of wave {wave.index} again")
            except TimeoutError:
                pass
            r.controls.raise_if_stopped()
            await self.unpaused(f"wave {wave.index}")

    # -- the pause, resume and override_window updates ---------------------------------------------
    def pause(self, req: Pause) -> Ack:
        """Recorded at once; every running stage holds before its promotion, the rollout before the next wave."""
        r = self.r
        r.controls.pause(req.by, req.reason, holds_at=holds_at(r.state))
        for key in r.running():
            r.signal_stage(key, StageWorkflow.set_hold, True)
        r.publish()
        return Ack(message=f"paused by {req.by}; holds at the next safe point")

    def resume(self, req: Resume) -> Ack:
        self.r.controls.resume(req.by)
        self.holds.tell_stages()  # still true while a stage is held on failure
        self.r.publish()
        return Ack(message=f"resumed by {req.by}")

    def check_override(self, req: OverrideWindow) -> None:
        """override_window's validator: a running rollout, an approver, a stage waiting for its window now."""
        r = self.r
        r.approval.check(req.by, field="by")
        r.check_stage(req.stage)
        window = waiting_window(r.state)
        if req.stage not in window:
            waiting = ", ".join(window) or "none"
            raise refused(f"{req.stage} is not waiting for a deployment window; waiting: {waiting}")

    def override_window(self, req: OverrideWindow) -> Ack:
        r = self.r
        r.audit(req.by, "override-window", req.stage, req.reason)
        if req.stage not in r.state.window_overrides:
            r.state.window_overrides.append(req.stage)
        return Ack(message=f"{req.stage} may start outside its window")
