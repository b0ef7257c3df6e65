"""The arithmetic of an evacuation or restore, with no I/O: step weights, pre-warm sizes, and every refusal.

Weights are Route 53 integers (0-255) per set identifier; a region's traffic share is weight / total. All
shares are exact fractions, so a region that is not part of the shift keeps exactly its weight.

Evacuation: after step i the evacuated region keeps `steps[i]` percent of its home share (its share with no
region evacuated: its starting share unless another region is evacuated); what it gives up goes to the
receivers in proportion to their starting shares. Restore walks the same levels back up (`restore_levels`),
moving every weight from where it is now toward the home weights, leaving regions evacuated on their own alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from common.metric_spec import MetricSpec
from common.traffic.models import DEFAULT_STEPS as DEFAULT_STEPS  # defined with the other knobs' types
from common.traffic.models import MAX_STEPS as MAX_STEPS
from common.traffic.models import PlanInput, RegionPlan, RegionRole

MAX_WEIGHT = 255


class PlanRefused(Exception):
    """The shift cannot be done as asked; nothing was changed. One line per problem, each saying what to do."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Member:
    """A region of the record set that has a traffic target: its record and evacuation bounds."""

    region: str
    set_identifier: str
    max_replicas: int | None = None
    health: tuple[MetricSpec, ...] = ()


@dataclass
class Shift:
    """The weights after each step, the region's level at each, and every member's part."""

    levels: list[int]
    steps: list[dict[str, int]]
    roles: dict[str, RegionRole] = field(default_factory=dict)
    home: dict[str, int] = field(default_factory=dict)


def step_problems(steps: Sequence[int]) -> list[str]:
    """What is wrong with a list of levels (percent of the region's starting share after each step)."""
    if not steps:
        return ["steps: give at least one level, e.g. 67,33,0 (the region's share in percent after each step)"]
    if len(steps) > MAX_STEPS:
        return [f"steps: at most {MAX_STEPS} steps; got {len(steps)}"]
    bad = [s for s in steps if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 100]
    if bad:
        return [f"steps: each level is the region's weight in percent of its starting share after that step, "
                f"a whole number from 0 to 99; got {', '.join(map(str, bad))}"]
    if any(b >= a for a, b in zip(steps, steps[1:])):
        return [f"steps: levels must strictly decrease and end at 0 or above, e.g. 67,33,0; got {','.join(map(str, steps))}"]
    return []


def restore_levels(steps: Sequence[int]) -> list[int]:
    """The levels a restore visits: the evacuation's levels walked back, ending at 100% (e.g. 67,33,0 -> 33,67,100)."""
    return [*reversed(list(steps)[:-1]), 100]


def to_weights(shares: dict[str, Fraction], total: int) -> dict[str, int]:
    """Integer weights with these shares: `total` in all (less if a weight would pass 255), largest remainders first."""
    top = max(shares.values(), default=Fraction(0))
    if top * total > MAX_WEIGHT:
        total = math.floor(MAX_WEIGHT / top)
    raw = {k: s * total for k, s in shares.items()}
    out = {k: math.floor(v) for k, v in raw.items()}
    left = total - sum(out.values())
    for k in sorted(raw, key=lambda k: (-(raw[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def _shares(weights: dict[str, int]) -> dict[str, Fraction]:
    total = sum(weights.values())
    return {k: Fraction(w, total) if total else Fraction(0) for k, w in weights.items()}


def evacuation_steps(weights: dict[str, int], evacuated: str, receivers: Sequence[str], levels: Sequence[int],
                     reference: Fraction | None = None) -> list[dict[str, int]]:
    """Weights after each step: `evacuated` keeps `level`% of `reference` (default: its share now), receivers take the rest pro rata."""
    total = sum(weights.values())
    start = _shares(weights)
    ref = start[evacuated] if reference is None else reference
    pool = sum(start[r] for r in receivers)
    out: list[dict[str, int]] = []
    for level in levels:
        kept = ref * Fraction(level, 100)
        freed = start[evacuated] - kept
        shares = dict(start)
        shares[evacuated] = kept
        for r in receivers:
            shares[r] = start[r] + freed * start[r] / pool
        out.append(to_weights(shares, total))
    return out


def evacuated_on_their_own(weights: dict[str, int], home: dict[str, int], restored: str | None = None) -> set[str]:
    """Set identifiers evacuated on their own account: a share now below their home share by more than one weight unit.

    An evacuation only ever adds to its receivers' shares and a restore never takes a region below its home share,
    so a region below its home share was evacuated (or set so by hand) itself; Bifrost leaves it where it is."""
    total = sum(weights.values())
    if total == 0:
        return set()
    now, goal = _shares(weights), _shares(home)
    return {k for k in weights if k != restored and goal.get(k, 0) > 0 and now[k] < goal[k] - Fraction(1, total)}


def restore_target(weights: dict[str, int], home: dict[str, int], restored: str) -> dict[str, int]:
    """Where restoring `restored` ends: the home weights, except that regions evacuated on their own keep their weight.

    With no other region evacuated this is `home` exactly; otherwise the regions not evacuated share what the
    evacuated ones leave, in proportion to their home weights (so restoring every region gives `home` back)."""
    kept = evacuated_on_their_own(weights, home, restored)
    if not kept:
        return dict(home)
    free = [k for k in weights if k not in kept]
    pool = sum(home[k] for k in free)
    left = sum(weights.values()) - sum(weights[k] for k in kept)
    out = {k: weights[k] for k in kept}
    out.update(to_weights({k: Fraction(home[k], pool) for k in free}, left) if pool and left > 0 else {k: 0 for k in free})
    return out


def probe_weights(home: dict[str, int], sid: str, percent: int) -> dict[str, int]:
    """The home weights with `sid` at `percent` of its home share and the others sharing the rest pro rata
    (the region guard's probe: a restore to these, then the rest of the way once the probe is healthy)."""
    shares = _shares(home)
    kept = shares[sid] * Fraction(percent, 100)
    others = 1 - shares[sid]
    out = {k: (kept if k == sid else s + (shares[sid] - kept) * s / others if others else s) for k, s in shares.items()}
    weights = to_weights(out, sum(home.values()))
    if percent and weights[sid] == 0:
        weights[sid] = 1  # a probe gets some traffic however small its share
    return weights


def restore_steps(current: dict[str, int], target: dict[str, int], levels: Sequence[int]) -> list[dict[str, int]]:
    """Weights after each step of a restore: every share moves from now toward `target`, `level`% of the way."""
    now, goal = _shares(current), _shares(target)
    total = sum(target.values())
    out: list[dict[str, int]] = []
    for level in levels:
        f = Fraction(level, 100)
        step = dict(target) if f >= 1 else to_weights({k: now[k] + f * (goal[k] - now[k]) for k in target}, total)
        if step != (out[-1] if out else current) and sum(step.values()) > 0:
            out.append(step)
    return out


def prewarm_replicas(replicas: int, old_share: Fraction, new_share: Fraction, headroom: float) -> int:
    """ceil(replicas x new share / old share x headroom), never fewer than now: enough to take the new share."""
    if new_share <= old_share or old_share <= 0:
        return replicas
    return max(replicas, math.ceil(replicas * new_share / old_share * Fraction(str(headroom))))


def plan_shift(inp: PlanInput, weights: dict[str, int], members: dict[str, Member]) -> Shift:
    """Who gives and who takes, and the weights after each step; raise PlanRefused listing every problem."""
    problems = step_problems(inp.steps)
    x = members.get(inp.region)
    known = ", ".join(sorted(members)) or "none"
    if x is None:
        raise PlanRefused([f"region: {inp.region} has no traffic target in the record set of {inp.service} "
                           f"({inp.environment}); regions with traffic: {known}", *problems])
    unmanaged = sorted(set(weights) - {m.set_identifier for m in members.values()})
    missing = sorted(m.region for m in members.values() if m.set_identifier not in weights)
    if x.set_identifier not in weights:
        problems.append(f"region: the record set has no record with set identifier {x.set_identifier!r} for "
                        f"{inp.region} (records: {', '.join(sorted(weights))}); create it or fix set_identifier "
                        "in the targets file")
        raise PlanRefused(problems)
    home = _home(inp, weights, problems)
    roles: dict[str, RegionRole] = {r: "other" for r in members}
    if inp.direction == "evacuate":
        receivers = _receivers(inp, weights, home, members, missing, unmanaged, problems)
        roles[inp.region] = "evacuated"
        for r in receivers:
            roles[r] = "receiver"
        if problems:
            raise PlanRefused(problems)
        # levels are percent of the region's home share: a receiver of another evacuation ends below its home share
        # too, so it counts as evacuated; levels it is already below are skipped
        ref = min(_shares(home)[x.set_identifier], _shares(weights)[x.set_identifier])
        if inp.home_weights is not None:
            ref = _shares(home)[x.set_identifier]
        levels = [lv for lv in inp.steps if ref * Fraction(lv, 100) < _shares(weights)[x.set_identifier]]
        if not levels:
            raise PlanRefused([f"steps: {inp.region} is already below {inp.steps[0]}% of its home share (weights "
                               f"{weights}, home {home}); nothing to evacuate at these levels"])
        steps = evacuation_steps(weights, x.set_identifier, [members[r].set_identifier for r in receivers], levels, ref)
        return Shift(levels=levels, steps=steps, roles=roles, home=home)
    _check_restore(inp, home, x, problems)
    if problems:
        raise PlanRefused(problems)
    target = restore_target(weights, home, x.set_identifier)
    if target == weights or _shares(weights)[x.set_identifier] >= _shares(target)[x.set_identifier]:
        raise PlanRefused([f"region: {inp.region} already has its share (weights now {weights}, home {home}); "
                           "nothing to restore"])
    roles[inp.region] = "restored"
    for r, m in members.items():
        if r != inp.region and m.set_identifier in weights and target[m.set_identifier] != weights[m.set_identifier]:
            roles[r] = "receiver"
    steps = restore_steps(weights, target, restore_levels(inp.steps))
    goal = _shares(target)[x.set_identifier]
    levels = [round(100 * _shares(s)[x.set_identifier] / goal) for s in steps]
    return Shift(levels=levels, steps=steps, roles=roles, home=home)


def _home(inp: PlanInput, weights: dict[str, int], problems: list[str]) -> dict[str, int]:
    """The weights with no region evacuated: given (restore_to, or home_weights from the last traffic change) or now."""
    home = inp.restore_to.weights if inp.direction == "restore" and inp.restore_to is not None else inp.home_weights
    if home is None:
        return dict(weights)
    field = "restore_to.weights" if inp.direction == "restore" else "home_weights"
    if set(home) != set(weights):
        problems.append(f"{field}: the record set now has records {sorted(weights)}, the evacuation "
                        f"recorded {sorted(home)}; it changed since, so set the weights by hand")
        return dict(weights)
    if not any(w > 0 for w in home.values()) or any(not 0 <= w <= MAX_WEIGHT for w in home.values()):
        problems.append(f"{field}: weights must be 0-255 and not all 0; got {home}")
        return dict(weights)
    return dict(home)


def _receivers(inp: PlanInput, weights: dict[str, int], home: dict[str, int], members: dict[str, Member],
               missing: list[str], unmanaged: list[str], problems: list[str]) -> list[str]:
    x = members[inp.region]
    away = evacuated_on_their_own(weights, home, x.set_identifier)
    if weights[x.set_identifier] == 0:
        problems.append(f"region: {inp.region} already serves no traffic (weight 0 in {weights}); nothing to evacuate")
    if inp.receivers:
        receivers = []
        for r in inp.receivers:
            m = members.get(r)
            if r == inp.region:
                problems.append(f"receivers: {r} is the region being evacuated; it cannot also receive")
            elif m is None:
                problems.append(f"receivers: unknown region {r}; regions of the record set with a traffic target: "
                                f"{', '.join(sorted(set(members) - {inp.region})) or 'none'}")
            elif r in missing:
                problems.append(f"receivers: {r} has no record in the record set (set identifier {m.set_identifier!r})")
            elif weights[m.set_identifier] == 0:
                problems.append(f"receivers: {r} serves no traffic now (weight 0); Bifrost sizes receivers by their "
                                "current share, so pick regions that serve")
            elif m.set_identifier in away:
                problems.append(f"receivers: {r} is evacuated itself (its share is below its home share); restore it "
                                "first or pick other receivers")
            else:
                receivers.append(r)
        return receivers
    receivers = sorted(r for r, m in members.items()
                       if r != inp.region and r not in missing and weights[m.set_identifier] > 0
                       and m.set_identifier not in away)
    if not receivers and weights[x.set_identifier] > 0:
        others = [u for u in unmanaged if weights[u] > 0]
        extra = (f"; records {', '.join(others)} also serve but have no target in the targets file, so Bifrost can "
                 "neither pre-warm nor check them") if others else ""
        problems.append(f"region: {inp.region} is the last region serving {inp.service} (weights {weights}); "
                        f"evacuating it would leave no region to take its traffic{extra}")
    return receivers


def _check_restore(inp: PlanInput, home: dict[str, int], x: Member, problems: list[str]) -> None:
    if inp.restore_to is None:
        problems.append("restore_to: a restore needs the weights and replicas to return to (the evacuation's "
                        "home_weights and replicas_before); `bifrost restore` reads them from the last evacuation")
    elif home.get(x.set_identifier, 0) == 0 and not problems:
        problems.append(f"restore_to.weights: {inp.region} had weight 0 before; there is nothing to restore")


def capacity_plan(inp: PlanInput, shift: Shift, weights: dict[str, int], members: dict[str, Member],
                  replicas: dict[str, int]) -> list[RegionPlan]:
    """Every member's plan: pre-warm sizes (bounded by max_replicas) and, for a restore, the scale-down after."""
    problems: list[str] = []
    final = shift.steps[-1] if shift.steps else weights
    start_shares = _shares(weights)
    out: list[RegionPlan] = []
    for region in sorted(members):
        m = members[region]
        role = shift.roles.get(region, "other")
        sid = m.set_identifier
        before = weights.get(sid, 0)
        plan = RegionPlan(region=region, set_identifier=sid, role=role, weight_before=before,
                          weight_after=final.get(sid, before), replicas_before=replicas.get(region),
                          max_replicas=m.max_replicas, health=list(m.health),
                          share_grows=any(_shares(s).get(sid, 0) > start_shares.get(sid, 0) for s in shift.steps))
        have = replicas.get(region)
        recorded = inp.restore_to.replicas.get(region) if inp.restore_to is not None else None
        if recorded is not None and recorded < 1:  # typed by hand or read off a stopped primary: sizes nothing
            recorded = None
        home_share = _shares(shift.home or weights).get(sid, Fraction(0))
        if have is not None and inp.prewarm and plan.gains:
            peak = max((_shares(s)[sid] for s in shift.steps), default=start_shares[sid])
            if role == "restored" and home_share > 0:
                # sized from what it ran at its home share: the recorded replicas, else what it runs now (an
                # evacuation never scales the region it drains, so after a probe it still runs its home replicas);
                # scaling them by the share it has now would ratchet them up cycle after cycle
                ref = recorded if recorded is not None else have
                want = max(ref, prewarm_replicas(ref, home_share, peak, inp.headroom))
                why = (f"it ran {ref} replicas at its home share of {float(home_share):.0%} and will take "
                       f"{float(peak):.0%} (x headroom {inp.headroom:g})")
            elif start_shares[sid] > 0:
                want = prewarm_replicas(have, start_shares[sid], peak, inp.headroom)
                why = (f"its share grows from {float(start_shares[sid]):.0%} to {float(peak):.0%} "
                       f"(x headroom {inp.headroom:g})")
            else:  # drained now: size it from what it ran at its home share before the evacuation
                ref = max(have, recorded or 0)
                want = max(ref, prewarm_replicas(ref, home_share, peak, inp.headroom)) if home_share > 0 else ref
                why = (f"it ran {ref} replicas at its home share of {float(home_share):.0%} and will take "
                       f"{float(peak):.0%} (x headroom {inp.headroom:g})")
            if want > have:
                plan.prewarm_to = want
                if m.max_replicas is not None and want > m.max_replicas:
                    problems.append(
                        f"max_replicas: {region} needs {want} replicas (now {have}) because {why}, but its "
                        f"max_replicas is {m.max_replicas}; raise traffic.max_replicas in the targets file, "
                        "add receivers (--to) or stop at a higher last level (--steps)")
        end_share = _shares(final).get(sid, Fraction(0))
        if inp.direction == "restore" and have is not None and recorded is not None:
            # back to the replicas recorded before the evacuation, but never below what its share at the end needs:
            # every member, so that no pre-warm (this restore's or an earlier one's) outlives the restore, including a
            # receiver whose weight this restore leaves alone (a probe's restore already gave its traffic back)
            keep = max(recorded, prewarm_replicas(recorded, home_share, end_share, inp.headroom)) if home_share > 0 else recorded
            if max(have, plan.prewarm_to or 0) > keep:
                plan.scale_down_to = keep
        out.append(plan)
    if problems:
        raise PlanRefused(problems)
    return out
