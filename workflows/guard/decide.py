"""What the region guard decides after each look, by the rules of workflows/guard/rules.py: withdraw proposals
whose reason is gone; evacuate (at most one automatically a look), propose or refuse each sick region; drain a
failing probe again or restore a healthy one the rest of the way; restore (or propose to) a region rested
for the hold-down. Carrying a decision out is workflows/guard/actions.py."""

from __future__ import annotations

from temporalio import workflow

from workflows.guard.actions import Actions
from workflows.guard.models import RegionWatch
from workflows.guard.proposals import Proposals
from workflows.guard.records import GUARD
from workflows.guard.rules import evacuation_verdict, probe_outcome, restore_due, sick_regions


async def decide(actions: Actions, proposals: Proposals) -> None:
    """Apply the rules to every region once, in a fixed order (sick regions first, then probes and restores)."""
    proposals.withdraw_stale()
    await _sick(actions, proposals)
    for watch in sorted(actions.state.regions.values(), key=lambda w: w.region):
        await _evacuated(watch, actions, proposals)


async def _sick(actions: Actions, proposals: Proposals) -> None:
    """Each sick region, the longest sick first: evacuate, propose or refuse (a refusal recorded once)."""
    rec, st = actions.records, actions.state
    for watch in sick_regions(st, rec.inp.judge, rec.inp.rules, workflow.now()):
        verdict = evacuation_verdict(rec.inp.rules, watch.region, serving=st.serving(), evacuated=st.evacuated(),
                                     readiness=watch.readiness, last_auto=st.last_auto_evacuation,
                                     now=workflow.now())
        why = [f"unhealthy for {watch.streak.unhealthy} looks: {watch.verdict}", *verdict.reasons]
        if verdict.action == "evacuate":
            rec.decision(watch.region, "evacuate", why)
            await actions.evacuate(watch, by=GUARD, automatic=True)
            return  # one automatic evacuation a look: the next look sees the fleet (and readiness) after it
        if verdict.action == "propose":
            proposals.propose(watch.region, "evacuate", why)
        else:
            rec.decision(watch.region, "refuse", why, once=True)


async def _evacuated(watch: RegionWatch, actions: Actions, proposals: Proposals) -> None:
    """A probing region: drained again when sick, restored when healthy for `probe_looks`; a region the guard
    evacuated and that has rested: restored, or proposed for restore (`rules.restore`)."""
    rec, inp = actions.records, actions.inp
    outcome = probe_outcome(watch, inp.judge, inp.probe_looks)
    if outcome == "drain":  # the probe failed against its peers: drain it again
        rec.decision(watch.region, "evacuate", [f"the probe is unhealthy against its peers: {watch.verdict}"])
        watch.probing = False
        await actions.evacuate(watch, by=GUARD, automatic=False, restore=watch.restore)
    elif outcome == "restore":
        rec.decision(watch.region, "restore", [f"the probe is healthy for {watch.streak.healthy} looks "
                                               f"against its peers: {watch.verdict}"])
        await actions.restore(watch, by=GUARD)
    elif restore_due(watch, inp.judge):
        why = [f"not unhealthy for {watch.streak.calm} looks ({watch.streak.healthy} healthy against its peers, "
               f"the rest without data): {watch.verdict}"]
        if inp.rules.restore == "auto":
            rec.decision(watch.region, "restore", why)
            await actions.restore(watch, by=GUARD)
        else:
            proposals.propose(watch.region, "restore", why)
