"""The region guard's rules (issue #19 item 1): never the last region, at most M at once, a gap, quiet windows,
receivers that cannot take the load; properties over random fleets and random sequences of sick regions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from activities.guard_models import Readiness
from workflows.guard.models import GuardRules
from workflows.guard.rules import evacuation_verdict
from workflows.request import DeployWindow

REGIONS = ["r0", "r1", "r2", "r3", "r4"]
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # a Wednesday


def ready(region: str, ok: bool = True) -> Readiness:
    return Readiness(region=region, ready=ok, problems=[] if ok else ["ap-south-1: needs 41 replicas, max_replicas is 40"])


def verdict(rules: GuardRules, region: str = "r0", *, serving: set[str] | None = None, evacuated: set[str] = frozenset(),  # type: ignore[assignment]
            readiness: Readiness | None = None, last_auto: datetime | None = None, now: datetime = NOW):
    return evacuation_verdict(rules, region, serving=serving if serving is not None else {"r0", "r1", "r2"},
                              evacuated=set(evacuated), readiness=readiness or ready(region), last_auto=last_auto, now=now)


def test_auto_evacuates_when_every_rule_allows() -> None:
    assert verdict(GuardRules(mode="auto")).action == "evacuate"


def test_never_the_last_serving_region() -> None:
    v = verdict(GuardRules(mode="auto"), serving={"r0"}, evacuated={"r1", "r2"})
    assert v.action == "refuse" and any("last serving region" in r for r in v.reasons)


def test_at_most_m_evacuated() -> None:
    v = verdict(GuardRules(mode="auto", max_evacuated=1), evacuated={"r3"}, serving={"r0", "r1", "r2"})
    assert v.action == "refuse" and "max_evacuated is 1" in v.reasons[0]
    assert verdict(GuardRules(mode="auto", max_evacuated=2), evacuated={"r3"}).action == "evacuate"


def test_refuses_when_the_receivers_cannot_take_the_load_and_says_why() -> None:
    v = verdict(GuardRules(mode="auto"), readiness=ready("r0", ok=False))
    assert v.action == "refuse" and "max_replicas is 40" in v.reasons[0]


def test_inside_the_gap_or_a_quiet_window_or_in_propose_mode_it_only_proposes() -> None:
    assert verdict(GuardRules(mode="auto", min_gap_minutes=60), last_auto=NOW - timedelta(minutes=59)).action == "propose"
    assert verdict(GuardRules(mode="auto", min_gap_minutes=60), last_auto=NOW - timedelta(minutes=60)).action == "evacuate"
    quiet = GuardRules(mode="auto", quiet_windows=[DeployWindow(days=["wed"], start="11:00", end="13:00")])
    assert verdict(quiet).action == "propose" and "quiet window" in verdict(quiet).reasons[0]
    assert verdict(quiet, now=NOW + timedelta(hours=2)).action == "evacuate"
    assert verdict(GuardRules(mode="propose")).reasons == ["mode is propose"]


def test_rules_are_strict_input() -> None:
    with pytest.raises(ValidationError, match="max_evacuated"):
        GuardRules(max_evacuated=0)
    with pytest.raises(ValidationError, match="timezone"):
        GuardRules(timezone="Mars/Olympus")
    with pytest.raises(ValidationError, match="mode"):
        GuardRules.model_validate({"mode": "yolo"})


rules_st = st.builds(GuardRules, mode=st.sampled_from(["auto", "propose"]), max_evacuated=st.integers(1, 4),
                     min_gap_minutes=st.sampled_from([0.0, 5.0, 30.0]))


@given(rules_st, st.sets(st.sampled_from(REGIONS)), st.sets(st.sampled_from(REGIONS)), st.sampled_from(REGIONS),
       st.booleans(), st.none() | st.integers(0, 120))
def test_a_verdict_never_breaks_a_hard_rule(rules: GuardRules, serving: set[str], evacuated: set[str], region: str,
                                            receivers_ok: bool, minutes_ago: int | None) -> None:
    last = None if minutes_ago is None else NOW - timedelta(minutes=minutes_ago)
    v = evacuation_verdict(rules, region, serving=serving, evacuated=evacuated - serving,
                           readiness=ready(region, receivers_ok), last_auto=last, now=NOW)
    assert v.reasons
    if v.action != "refuse":
        assert region in serving and len(serving) >= 2 and receivers_ok
        assert len(evacuated - serving - {region}) < rules.max_evacuated
    if v.action == "evacuate":
        assert rules.mode == "auto" and (last is None or NOW - last >= timedelta(minutes=rules.min_gap_minutes))


@settings(max_examples=200)
@given(rules_st, st.integers(2, 5), st.lists(st.tuples(st.integers(0, 4), st.integers(1, 40), st.booleans()), max_size=40))
def test_any_sequence_of_sick_regions_keeps_one_serving_m_at_most_and_the_gap(
        rules: GuardRules, n: int, events: list[tuple[int, int, bool]]) -> None:
    """Drive the rules as the guard does: a region falls sick (or is restored) minutes later; approve every proposal."""
    regions = REGIONS[:n]
    serving, evacuated = set(regions), set[str]()
    now, last_auto = NOW, None
    autos: list[datetime] = []
    for index, minutes, approve in events:
        now += timedelta(minutes=minutes)
        region = regions[index % n]
        if region in evacuated:
            evacuated.discard(region)  # healed and restored
            serving.add(region)
            continue
        v = evacuation_verdict(rules, region, serving=serving, evacuated=evacuated, readiness=ready(region),
                               last_auto=last_auto, now=now)
        if v.action == "evacuate" or (v.action == "propose" and approve):
            serving.discard(region)
            evacuated.add(region)
            if v.action == "evacuate":
                autos.append(now)
                last_auto = now
        assert serving and len(evacuated) <= rules.max_evacuated
    gap = timedelta(minutes=rules.min_gap_minutes)
    assert all(b - a >= gap for a, b in zip(autos, autos[1:]))


@given(st.dictionaries(st.sampled_from(REGIONS), st.integers(1, 255), min_size=2), st.integers(1, 99), st.data())
def test_probe_weights_give_the_region_its_percent_and_the_others_the_rest_pro_rata(
        home: dict[str, int], percent: int, data: st.DataObject) -> None:
    from common.traffic.plan import probe_weights

    region = data.draw(st.sampled_from(sorted(home)))
    out = probe_weights(home, region, percent)
    total, t = sum(home.values()), sum(out.values())
    assert set(out) == set(home) and all(0 <= w <= 255 for w in out.values()) and out[region] >= 1
    assert abs(out[region] / t - home[region] / total * percent / 100) <= 1.5 / t + 1e-9  # rounding, or the 1 given
    others = [k for k in home if k != region]
    for k in others:  # the others keep their proportions to each other, within rounding
        assert abs(out[k] / t - home[k] / total * (1 + (home[region] / total) * (1 - percent / 100)
                                                    / (1 - home[region] / total))) <= 1.5 / t + 1e-9
    assert out[region] <= max(1, home[region])


def test_after_a_restore_the_same_region_needs_stronger_evidence_within_the_backoff() -> None:
    from canary.guard import GuardJudge, Streak
    from workflows.guard.models import EvacuationRecord, GuardState, RegionWatch
    from workflows.guard.rules import looks_needed, sick_regions

    judge, rules = GuardJudge(unhealthy_looks=2), GuardRules(backoff_hours=24)
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    fresh = RegionWatch(region="a", streak=Streak(unhealthy=2))
    assert looks_needed(fresh, judge, rules, now) == 2
    once = [EvacuationRecord(evacuated_at=now - timedelta(hours=3), restored_at=now - timedelta(hours=2))]
    flapping = fresh.model_copy(update={"evacuations": once})
    assert looks_needed(flapping, judge, rules, now) == 4
    assert looks_needed(flapping, judge, rules, now + timedelta(hours=21)) == 4
    assert looks_needed(flapping, judge, rules, now + timedelta(hours=23)) == 2  # 25 h after the restore: the back-off is over
    twice = flapping.model_copy(update={"evacuations": once * 2})
    assert looks_needed(twice, judge, rules, now) == 8
    assert looks_needed(fresh, judge, rules, now, incident=True) == 3
    state = GuardState(workflow_id="guard/x", service="x", regions={"a": flapping, "b": fresh.model_copy(
        update={"region": "b"})})
    assert [w.region for w in sick_regions(state, judge, rules, now)] == ["b"]


def test_a_sick_region_waits_one_more_look_while_another_region_may_be_going_the_same_way() -> None:
    """Another region possibly worse than its own history, or too quiet to show it yet: one more look before the
    sick region counts, so a problem spreading from region to region is not moved onto the next region."""
    from canary.guard import GuardJudge, Streak
    from workflows.guard.models import GuardState, RegionWatch
    from workflows.guard.rules import others_uncertain, sick_regions

    judge, rules, now = GuardJudge(unhealthy_looks=2), GuardRules(), datetime(2026, 3, 2, 12, tzinfo=UTC)
    regions = {"a": RegionWatch(region="a", streak=Streak(unhealthy=2), serving=True),
               "b": RegionWatch(region="b", serving=True), "c": RegionWatch(region="c", serving=True)}
    plain = GuardState(workflow_id="guard/x", service="x", regions=regions, suspect=["a"], unsure=["a"])
    assert not others_uncertain("a", plain.suspect, plain.unsure)
    assert [w.region for w in sick_regions(plain, judge, rules, now)] == ["a"]
    for field in ("suspect", "unsure"):
        waiting = plain.model_copy(update={field: ["a", "b"]})
        assert others_uncertain("a", waiting.suspect, waiting.unsure)
        assert sick_regions(waiting, judge, rules, now) == []
        regions["a"].streak = Streak(unhealthy=3)
        assert [w.region for w in sick_regions(waiting, judge, rules, now)] == ["a"]
        regions["a"].streak = Streak(unhealthy=2)
