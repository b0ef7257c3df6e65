"""The plan obeys every blast-radius rule, for generated requests (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.plan import PlanError, build_plan
from workflows.request import RequestError, RolloutRequest, parse_request


@st.composite
def requests(draw) -> RolloutRequest:
    n = draw(st.integers(1, 7))
    names = [f"r{i}" for i in range(n)]
    envs = [draw(st.sampled_from([["test", "prod"], ["prod"], ["test"]])) for _ in names]
    if not any("prod" in e for e in envs):
        envs[0] = ["test", "prod"]
    weights = [draw(st.integers(1, 20)) if "prod" in e else 0 for e in envs]
    total = sum(weights)
    shares = [round(w / total, 4) for w in weights]
    prod_idx = [i for i, e in enumerate(envs) if "prod" in e]
    shares[prod_idx[-1]] = round(1 - sum(shares[i] for i in prod_idx[:-1]), 4)
    caps = sorted(draw(st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5, 0.75, 1.0]), min_size=1, max_size=4)))
    canary = draw(st.one_of(st.none(), st.sampled_from([names[i] for i in prod_idx])))
    data = {
        "service": "svc", "version": "1.0.0", "requested_by": "prop",
        "regions": [{"name": nm, "environments": e, "traffic_share": s} for nm, e, s in zip(names, envs, shares)],
        "canary": {"metrics": [{"name": "m"}]},
        "blast_radius": {
            "max_parallel_regions": draw(st.integers(1, 4)),
            "max_parallel_prod_regions": draw(st.integers(1, 3)),
            "prod_traffic_caps": caps,
            "canary_region": canary,
        },
    }
    try:
        return parse_request(data)
    except RequestError:
        from hypothesis import reject

        reject()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(requests())
def test_every_plan_obeys_every_rule(req: RolloutRequest):
    br = req.blast_radius
    try:
        plan = build_plan(req)
    except PlanError as err:
        # the only refusal is a traffic cap that a single region exceeds in the wave it must go in
        assert err.rule == "blast_radius.prod_traffic_caps"
        assert "carries" in str(err) and "at most" in str(err)
        return
    stages = plan.stages()
    expected = {f"{r.name}/{e}" for r in req.regions for e in r.environments}
    keys = [s.key for s in stages]
    assert sorted(keys) == sorted(expected), "every stage exactly once"
    wave_of = {s.key: plan.wave_of(s.key) for s in stages}
    for r in req.regions:
        if r.environments == ["test", "prod"]:
            assert wave_of[f"{r.name}/test"] < wave_of[f"{r.name}/prod"], "test before prod"
    prod_waves = [w for w in plan.waves if any(s.environment == "prod" for s in w.stages)]
    canary = br.canary_region or min((r for r in req.regions if "prod" in r.environments), key=lambda r: r.traffic_share).name
    assert prod_waves[0].regions == [canary], "the first production wave is the canary region alone"
    for k, w in enumerate(prod_waves):
        cap = br.prod_traffic_caps[min(k, len(br.prod_traffic_caps) - 1)]
        assert w.traffic_share <= cap + 1e-6, f"wave {w.index} touches {w.traffic_share} > cap {cap}"
    for w in plan.waves:
        assert len(set(w.regions)) <= br.max_parallel_regions
        assert sum(s.environment == "prod" for s in w.stages) <= br.max_parallel_prod_regions
        assert len({s.environment for s in w.stages}) == 1, "a wave is all test or all prod"
    assert [w.index for w in plan.waves] == list(range(1, len(plan.waves) + 1))


def _req(**br) -> RolloutRequest:
    return parse_request({
        "service": "svc", "version": "1", "requested_by": "t", "canary": {"metrics": [{"name": "m"}]},
        "regions": [{"name": "a", "traffic_share": 0.1}, {"name": "b", "traffic_share": 0.3}, {"name": "c", "traffic_share": 0.6}],
        "blast_radius": br,
    })


def test_caps_grow_and_parallel_prod_regions_share_a_wave():
    plan = build_plan(_req(max_parallel_regions=3, max_parallel_prod_regions=2, prod_traffic_caps=[0.1, 1.0]))
    assert [(w.kind, w.regions) for w in plan.waves] == [
        ("test", ["a"]), ("prod", ["a"]), ("test", ["b", "c"]), ("prod", ["b", "c"]),
    ]


def test_a_region_too_big_for_its_wave_is_an_error_naming_the_rule():
    with pytest.raises(PlanError, match=r"region c carries 60% .* wave 3 may touch at most 40%"):
        build_plan(_req(prod_traffic_caps=[0.1, 0.3, 0.4]))


def test_canary_region_bigger_than_first_cap_is_refused():
    with pytest.raises(PlanError, match="canary region c carries 60%"):
        build_plan(_req(canary_region="c", prod_traffic_caps=[0.5, 1.0]))


def test_a_gate_on_a_wave_that_does_not_exist_is_refused():
    req = parse_request({
        "service": "svc", "version": "1", "requested_by": "t", "canary": {"metrics": [{"name": "m"}]},
        "regions": [{"name": "a", "traffic_share": 1.0}], "approvals": {"gates": [{"wave": 9}]},
    })
    with pytest.raises(PlanError, match=r"approvals.gates\[0\].wave: wave 9 does not exist; this plan has 2 waves"):
        build_plan(req)
