"""`bifrost judge FILE`: exit codes, JSON output, report file and field-naming validation errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from bifrost_cli.judge_cmd import judge


def write(tmp_path: Path, doc: Any, name: str = "input.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


BUCKETS = {"le": [100, 200], "counts": [[5, 3, 1]]}


def healthy_doc(shift: float = 1.0, n: int = 60) -> dict[str, Any]:
    rng = np.random.default_rng(42)
    return {
        "thresholds": {"pass": 95, "marginal": 75},
        "groups": {"latency": 50, "errors": 50},
        "metrics": [
            {"name": "latency_p50", "groups": ["latency"], "direction": "increase",
             "baseline": rng.lognormal(np.log(120), 0.1, n).tolist(), "canary": rng.lognormal(np.log(120 * shift), 0.1, n).tolist()},
            {"name": "error_rate", "groups": ["errors"], "nan_strategy": "replace", "effect_size": "mean_ratio",
             "baseline": (rng.binomial(2000, 0.005, n) / 2000).tolist() + [None], "canary": (rng.binomial(2000, 0.005, n) / 2000).tolist() + ["NaN"]},
        ],
    }


def test_pass_exits_zero_with_a_table(tmp_path: Path) -> None:
    res = CliRunner().invoke(judge, [write(tmp_path, healthy_doc())])
    assert res.exit_code == 0, res.output
    assert "latency_p50" in res.output and "error_rate" in res.output and "PASS" in res.output


def test_regression_exits_one_and_json_has_the_documented_fields(tmp_path: Path) -> None:
    res = CliRunner().invoke(judge, [write(tmp_path, healthy_doc(shift=1.3)), "--json"])
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert set(out) >= {"score", "verdict", "metrics"} and out["verdict"] == "fail"
    lat = out["metrics"][0]
    assert set(lat) == {"name", "classification", "critical", "p_value", "interval", "estimate", "effect_size", "reason"}
    assert lat["classification"] == "High" and lat["p_value"] < 1e-6 and len(lat["interval"]) == 2
    assert lat["effect_size"] == pytest.approx(1.3, rel=0.05) and lat["reason"]


def test_kayenta_mode_and_report(tmp_path: Path) -> None:
    out_html = tmp_path / "reports" / "judge.html"
    res = CliRunner().invoke(judge, [write(tmp_path, healthy_doc(shift=1.3)), "--mode", "kayenta", "--report", str(out_html)])
    assert res.exit_code == 1
    assert "kayenta mode" in res.output
    page = out_html.read_text()
    assert page.count("<img alt='ECDF of ") == 2 and page.count("<img alt='Time series of ") == 2 and "dead zone" in page


def test_insufficient_data_exits_one(tmp_path: Path) -> None:
    res = CliRunner().invoke(judge, [write(tmp_path, healthy_doc(n=8)), "--json"])
    assert res.exit_code == 1
    assert json.loads(res.output)["verdict"] == "insufficient_data"


def test_minimal_file_uses_defaults(tmp_path: Path) -> None:
    doc = {"metrics": [{"name": "m", "baseline": [1.0, 2.0, 3.0] * 10, "canary": [1.0, 2.0, 3.0] * 10}]}
    res = CliRunner().invoke(judge, [write(tmp_path, doc), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["metrics"][0]["reason"]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d["metrics"][0].update(direction="up"), "metrics[0].direction"),
        (lambda d: d["metrics"][1].update(allowed_increase=-1), "metrics[1].allowed_increase"),
        (lambda d: d["metrics"][1].pop("canary"), "metrics[1].canary"),
        (lambda d: d["metrics"][0].update(baseline=[1.0, "fast"]), "metrics[0].baseline[1]"),
        (lambda d: d["metrics"][0].update(colour="red"), "metrics[0].colour"),
        (lambda d: d["metrics"][1].update(name="latency_p50"), "metrics[1].name"),
        (lambda d: d.update(thresholds={"pass": 50, "marginal": 80}), "thresholds"),
        (lambda d: d.update(groups={"latency": 90, "errors": 30}), "groups"),
        (lambda d: d.update(metrics=[]), "metrics"),
        (lambda d: d["metrics"][0].update(kind="latency", baseline_buckets=BUCKETS), "canary_buckets: needed"),
        (lambda d: d["metrics"][0].update(kind="latency", baseline_buckets=BUCKETS,
                                          canary_buckets=BUCKETS | {"le": [100, 300]}), "canary_buckets.le"),
        (lambda d: d["metrics"][0].update(baseline_buckets=BUCKETS, canary_buckets=BUCKETS), "only a latency metric"),
        (lambda d: d["metrics"][0].update(kind="latency", baseline_buckets=BUCKETS,
                                          canary_buckets={"le": [100, 200], "counts": [[1]]}), "metrics[0].canary_buckets"),
    ],
)
def test_invalid_input_exits_two_naming_the_field(tmp_path: Path, mutate: Any, field: str) -> None:
    doc = healthy_doc()
    mutate(doc)
    res = CliRunner().invoke(judge, [write(tmp_path, doc)])
    assert res.exit_code == 2
    assert field in res.output, res.output


def test_unreadable_files_exit_two(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_json = runner.invoke(judge, [write(tmp_path, "{not json")])
    assert bad_json.exit_code == 2 and "not valid JSON" in bad_json.output
    assert runner.invoke(judge, [write(tmp_path, "[1, 2]")]).exit_code == 2
    assert runner.invoke(judge, [str(tmp_path / "missing.json")]).exit_code == 2


def _inconclusive_doc(factor: float) -> dict[str, Any]:
    from tests.canary.test_sequential import _quantiles

    return {"metrics": [{"name": "latency_p99", "baseline": _quantiles(1.0), "canary": _quantiles(factor)},
                        {"name": "error_rate", "critical": True, "baseline": [0.002] * 60, "canary": [0.002] * 60}]}


def test_stage_runs_the_sequential_decision_and_exits_three_to_extend(tmp_path: Path) -> None:
    path = write(tmp_path, _inconclusive_doc(1.1))
    res = CliRunner().invoke(judge, [path, "--stage", "1/6"])
    assert res.exit_code == 3, res.output
    assert "EXTEND (stage 1/6): inconclusive on latency_p99" in res.output and "60 more samples" in res.output
    res = CliRunner().invoke(judge, [path, "--stage", "1/6", "--look", "3", "--json"])
    assert res.exit_code == 0, res.output
    decision = json.loads(res.output)["decision"]
    assert decision["action"] == "pass" and decision["look"] == decision["max_looks"] == 3
    # without --stage: one fixed analysis at alpha, as before (no decision in the JSON)
    res = CliRunner().invoke(judge, [path, "--json"])
    assert res.exit_code == 0 and "decision" not in json.loads(res.output)


@pytest.mark.parametrize("stage", ["7/6", "0/6", "one/six", "1-6"])
def test_a_bad_stage_exits_two_naming_the_option(tmp_path: Path, stage: str) -> None:
    res = CliRunner().invoke(judge, [write(tmp_path, _inconclusive_doc(1.0)), "--stage", stage])
    assert res.exit_code == 2 and "--stage" in res.output, res.output
