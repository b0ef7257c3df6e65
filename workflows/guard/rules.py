"""How the region guard decides: whether a sick region may be evacuated now, only proposed, or must be refused;
when a probe is drained again or restored the rest of the way; when an evacuated region is due back.

Pure functions of the state the guard holds (no I/O, no clock: `now` is given), so the workflow, the CLI and the
property tests run the same rules. Hard limits refuse (and say why): never the last serving region, at most
`max_evacuated` regions evacuated at once, and receivers that cannot take the load. Soft limits turn an
automatic evacuation into a proposal a person approves: `mode: propose`, a quiet window, and the minimum gap
since the last automatic evacuation. Carrying a decision out is workflows/guard/actions.py; the loop that applies
these rules at every look is workflows/guard/decide.py. What the guard may do (`GuardRules`: mode, restore, M,
the gap, quiet windows) is input, in workflows/guard/models.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from activities.guard_models import Readiness
from canary.guard import GuardJudge
from workflows.guard.models import GuardRules, GuardState, Proposal, RegionWatch

Action = Literal["evacuate", "propose", "refuse"]


class Verdict(BaseModel):
    """What the rules allow for one sick region: evacuate now, propose (wait for approval), or refuse; and why."""

    action: Action
    reasons: list[str]


def evacuation_verdict(rules: GuardRules, region: str, *, serving: set[str], evacuated: set[str],
                       readiness: Readiness | None, last_auto: datetime | None, now: datetime) -> Verdict:
    """Apply the rules to one sick region. `serving`: regions with traffic now; `evacuated`: regions drained now."""
    refuse = []
    if region not in serving:
        refuse.append(f"{region} serves no traffic: nothing to evacuate")
    elif serving <= {region}:
        refuse.append(f"{region} is the last serving region; the guard never evacuates it")
    if len(evacuated - {region}) >= rules.max_evacuated:
        refuse.append(f"{len(evacuated - {region})} region(s) already evacuated ({', '.join(sorted(evacuated))}); "
                      f"max_evacuated is {rules.max_evacuated}")
    if readiness is None:
        refuse.append(f"the receivers' readiness for {region} is not known yet")
    elif not readiness.ready:
        refuse.append(f"the receivers cannot take {region}'s load: " + "; ".join(readiness.problems))
    if refuse:
        return Verdict(action="refuse", reasons=refuse)
    soft = []
    if rules.mode == "propose":
        soft.append("mode is propose")
    if rules.quiet(now):
        soft.append(f"inside a quiet window ({rules.timezone})")
    gap = timedelta(minutes=rules.min_gap_minutes)
    if last_auto is not None and now - last_auto < gap:
        soft.append(f"the last automatic evacuation was {_ago(now - last_auto)} ago; the minimum gap is "
                    f"{rules.min_gap_minutes:g} min")
    if soft:
        return Verdict(action="propose", reasons=soft)
    return Verdict(action="evacuate", reasons=["all rules allow it"])


MAX_BACKOFF = 8  # at most 8x the unhealthy looks


def looks_needed(watch: RegionWatch, judge: GuardJudge, rules: GuardRules, now: datetime, *,
                 incident: bool = False) -> int:
    """Unhealthy looks in a row before `watch` counts as sick: K, doubled for every restore of it within the
    back-off (no flapping), and one more while another region may be worse than its own history or cannot show it
    yet (`others_uncertain`: a multi-region incident may be starting; let the fleet show who is well)."""
    since = now - timedelta(hours=rules.backoff_hours)
    recent: int = sum(1 for e in watch.evacuations if e.restored_at is not None and e.restored_at > since)
    return int(judge.unhealthy_looks * min(MAX_BACKOFF, 2**recent) + (1 if incident else 0))


def others_uncertain(region: str, suspect: list[str], unsure: list[str]) -> bool:
    """Whether another region may be going the same way: possibly worse than its own history, or serving too few
    requests to show it yet. A problem that spreads from region to region shows in the first one a look or two
    before the next: moving traffic then would move it onto the next sick region."""
    return bool((set(suspect) | set(unsure)) - {region})


def sick_regions(state: GuardState, judge: GuardJudge, rules: GuardRules, now: datetime) -> list[RegionWatch]:
    """Serving regions unhealthy for long enough (`looks_needed`), the longest sick first (then by name)."""
    return sorted((w for w in state.regions.values() if w.serving and w.streak.unhealthy >= looks_needed(
        w, judge, rules, now, incident=others_uncertain(w.region, state.suspect, state.unsure))),
        key=lambda w: (-w.streak.unhealthy, w.region))


def proposal_stands(p: Proposal, watch: RegionWatch | None, judge: GuardJudge) -> bool:
    """Whether a proposal's reason still holds: the region still sick (evacuate) or still rested (restore)."""
    if watch is None:
        return False
    if p.action == "evacuate":
        return watch.serving and watch.streak.sick(judge)
    return not watch.serving and watch.streak.rested(judge)


ProbeOutcome = Literal["drain", "restore"]


def probe_outcome(watch: RegionWatch, judge: GuardJudge, probe_looks: int) -> ProbeOutcome | None:
    """A probing region sick against its peers is drained again; healthy for `probe_looks` looks it is restored
    the rest of the way; otherwise (or when not probing) the probe goes on."""
    if not watch.probing:
        return None
    if watch.streak.sick(judge):
        return "drain"
    if watch.streak.healthy >= probe_looks:
        return "restore"
    return None


def restore_due(watch: RegionWatch, judge: GuardJudge) -> bool:
    """A region the guard evacuated, not probing, is due back once not unhealthy for the hold-down."""
    return watch.evacuated_by_guard and not watch.probing and watch.streak.rested(judge)


def home_weights(state: GuardState) -> dict[str, int] | None:
    """The weights before the guard's first evacuation (what a restore returns to), or None when none is recorded:
    the readiness plan and a further evacuation start from them, not from a fleet already drained."""
    return next((w.restore.restore_to.weights for w in state.regions.values()
                 if w.restore is not None and w.restore.restore_to is not None), None)


def _ago(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"
