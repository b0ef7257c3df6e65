"""Random sequences of evacuations, restores, aborts and pauses over 3-5 regions, on the pure plan (hypothesis stateful).

The model plays what the workflow does with a plan (pre-warm, each step, scale down; abort reverts weights then
replicas, or keeps them) and what the CLI hands a restore (the home weights and the replicas recorded by the
region's last evacuation). After every step it checks: weights never all zero; no region's load passes what
its replicas carried at the start (the simulated fleet's model: demand fixed at 60% of the starting capacity);
a region evacuated on purpose stays evacuated until it is itself restored; restoring every region gives back
the starting weights.
"""

from __future__ import annotations

import os
from fractions import Fraction

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from common.traffic.models import PlanInput, RestoreTarget
from common.traffic.plan import Member, PlanRefused, capacity_plan, plan_shift

LEVELS = [[67, 33, 0], [30, 10, 0], [50, 0], [0], [80, 40]]
RPS = 100


def shares(weights: dict[str, int]) -> dict[str, Fraction]:
    total = sum(weights.values())
    return {k: Fraction(w, total) for k, w in weights.items()}


class TrafficSequences(RuleBasedStateMachine):
    """One service's record set and primaries, moved by the plan as the workflow would move them."""

    @initialize(data=st.data(), n=st.integers(3, 5))
    def start(self, data: st.DataObject, n: int) -> None:
        self.regions = [f"r{i}" for i in range(n)]
        self.home = {r: data.draw(st.integers(10, 255), label=f"weight {r}") for r in self.regions}
        self.weights = dict(self.home)
        self.replicas = {r: data.draw(st.integers(2, 8), label=f"replicas {r}") for r in self.regions}
        self.members = {r: Member(r, r) for r in self.regions}
        home = shares(self.home)
        self.demand = Fraction(6, 10) * sum(self.replicas[r] * RPS for r in self.regions)
        # each region's utilisation at the start: none may pass its own starting utilisation later on
        self.limit = max(self.demand * home[r] / (self.replicas[r] * RPS) for r in self.regions)
        self.evacuated: dict[str, dict[str, int]] = {}  # region -> replicas recorded by its evacuation
        self.log: list[str] = []

    # -- the workflow's moves on the model ----------------------------------------------------------
    def _check_capacity(self, where: str) -> None:
        total = sum(self.weights.values())
        assert total > 0, f"all weights zero {where}: {self.log}"
        for r in self.regions:
            load = self.demand * Fraction(self.weights[r], total)
            cap = self.replicas[r] * RPS
            assert load <= self.limit * cap, (f"{r} carries {float(load):.0f} rps on {self.replicas[r]} replicas "
                                              f"{where} (weights {self.weights}); {self.log}")

    def _run(self, inp: PlanInput, stop_after: int | None, revert: bool, pause_at: int | None = None) -> tuple[bool, int]:
        """Plan, pre-warm, apply steps (stopping after `stop_after` on an abort); return (planned, steps applied)."""
        try:
            shift = plan_shift(inp, dict(self.weights), self.members)
            plans = capacity_plan(inp, shift, dict(self.weights), self.members, dict(self.replicas))
        except PlanRefused as err:
            self.log.append(f"{inp.direction} {inp.region}: refused {err.problems}")
            return False, 0
        before_w, before_r = dict(self.weights), dict(self.replicas)
        self.log.append(f"{inp.direction} {inp.region} stop={stop_after} revert={revert}: {shift.steps}")
        for p in plans:
            if p.prewarm_to is not None:
                self.replicas[p.region] = max(self.replicas[p.region], p.prewarm_to)
        applied = 0
        for i, step in enumerate(shift.steps, 1):
            if stop_after is not None and i > stop_after:
                break
            self.weights = dict(step)
            applied = i
            self._check_capacity(f"after step {i} of {inp.direction} {inp.region}")
            if i == pause_at:  # held here until resumed; one change per service, so nothing else moves meanwhile
                self.log.append(f"paused after step {i}, resumed")
        if stop_after is not None and stop_after < len(shift.steps):
            if revert:  # weights back, then (after the TTL) replicas back
                self.weights = before_w
                self._check_capacity(f"after reverting {inp.direction} {inp.region}")
                self.replicas = {r: min(self.replicas[r], before_r[r]) if r in before_r else self.replicas[r]
                                 for r in self.regions}
                return True, 0
            return True, applied
        for p in plans:
            if p.scale_down_to is not None:
                self.replicas[p.region] = min(self.replicas[p.region], p.scale_down_to)
        self._check_capacity(f"after scaling down for {inp.direction} {inp.region}")
        return True, applied

    def _restore_input(self, region: str, levels: list[int]) -> PlanInput:
        return PlanInput(service="pay", region=region, direction="restore", steps=levels,
                         restore_to=RestoreTarget(weights=dict(self.home), replicas=self.evacuated[region]))

    # -- rules ------------------------------------------------------------------------------------
    @rule(data=st.data(), levels=st.sampled_from(LEVELS), abort=st.none() | st.tuples(st.integers(0, 2), st.booleans()),
          pause_at=st.none() | st.integers(1, 3))
    def evacuate(self, data: st.DataObject, levels: list[int], abort: tuple[int, bool] | None, pause_at: int | None) -> None:
        """Evacuate a region (optionally aborted after some steps; a pause only delays: one change per service)."""
        region = data.draw(st.sampled_from(self.regions), label="evacuate")
        inp = PlanInput(service="pay", region=region, steps=levels, home_weights=dict(self.home))
        replicas_before = dict(self.replicas)
        others = {r: Fraction(self.weights[r], sum(self.weights.values())) for r in self.regions if r != region}
        planned, applied = self._run(inp, abort[0] if abort else None, abort[1] if abort else True, pause_at)
        if planned and applied:
            self.evacuated.setdefault(region, replicas_before)
        for r in self.evacuated:
            if r != region and r in others:  # another evacuated region gets nothing of this one's traffic
                assert Fraction(self.weights[r], sum(self.weights.values())) <= others[r] + Fraction(1, sum(self.weights.values())), self.log

    @precondition(lambda self: bool(self.evacuated))
    @rule(data=st.data(), levels=st.sampled_from(LEVELS), abort=st.none() | st.tuples(st.integers(0, 2), st.booleans()),
          pause_at=st.none() | st.integers(1, 3))
    def restore(self, data: st.DataObject, levels: list[int], abort: tuple[int, bool] | None, pause_at: int | None) -> None:
        """Restore an evacuated region (optionally aborted); it never touches another evacuated region."""
        region = data.draw(st.sampled_from(sorted(self.evacuated)), label="restore")
        kept = {r: self.weights[r] for r in self.evacuated if r != region}
        kept_shares = {r: Fraction(w, sum(self.weights.values())) for r, w in kept.items()}
        planned, applied = self._run(self._restore_input(region, levels), abort[0] if abort else None,
                                     abort[1] if abort else True, pause_at)
        total = sum(self.weights.values())
        for r, w in kept.items():  # an evacuated region keeps its weight (and so its share, up to rounding)
            assert self.weights[r] == w or abs(Fraction(self.weights[r], total) - kept_shares[r]) <= Fraction(1, total), self.log
        back = shares(self.weights)[region] >= shares(self.home)[region] - Fraction(1, total)
        if planned and abort is None:
            assert back, self.log
        if back:  # restored, or a restore aborted (kept) once the region had its home share again: it serves
            del self.evacuated[region]

    @precondition(lambda self: bool(self.evacuated))
    @rule()
    def restore_everything(self) -> None:
        """Restoring every evacuated region, one after the other, gives back the starting weights exactly."""
        for region in sorted(self.evacuated):
            planned, _ = self._run(self._restore_input(region, [67, 33, 0]), None, True)
            assert planned or shares(self.weights)[region] >= shares(self.home)[region] - Fraction(1, sum(self.weights.values())), self.log
            del self.evacuated[region]
        assert self.weights == self.home, self.log

    @invariant()
    def weights_never_all_zero(self) -> None:
        if hasattr(self, "weights"):
            assert sum(self.weights.values()) > 0, self.log


TrafficSequences.TestCase.settings = settings(max_examples=int(os.environ.get('BIFROST_SEQUENCES', '200')), stateful_step_count=12, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow],
                                             phases=[Phase.explicit, Phase.reuse, Phase.generate])  # the log says what ran
test_traffic_sequences = TrafficSequences.TestCase
