"""deploy/monitoring: the alerting rules pass promtool (syntax and their own unit tests), the dashboard's queries
parse and name only metrics Bifrost exports, and the worker's pods are scraped on the port the worker serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from common import metrics
from tests.conftest import require_or_skip
from tests.deploy.manifests import DEPLOY, find

MONITORING = DEPLOY / "monitoring"
RULES = MONITORING / "bifrost-rules.yml"
RULE_TESTS = Path(__file__).parent / "bifrost-rules.test.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
EXPORTED = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str) and v.startswith("bifrost_")}


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        require_or_skip("promtool", "not on PATH (apt-get install prometheus)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def _names(expr: str) -> set[str]:
    """The bifrost_* metric names an expression reads (histogram series mapped back to their family)."""
    return {re.sub(r"_(bucket|count|sum)$", "", n) for n in re.findall(r"\bbifrost_[a-z_]+", expr)}


@pytest.mark.process
def test_the_rule_file_passes_promtool_check() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.process
def test_the_rules_fire_when_they_should_and_not_before() -> None:
    out = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


@pytest.mark.process
def test_the_rule_check_catches_a_broken_expression(tmp_path: Path) -> None:
    broken = RULES.read_text().replace("> 0\n        for: 6h", "> > 0\n        for: 6h")
    assert broken != RULES.read_text()
    (tmp_path / "broken.yml").write_text(broken)
    assert _promtool("check", "rules", str(tmp_path / "broken.yml")).returncode != 0


@pytest.mark.process
def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (Grafana's variables replaced by what they stand for), as a recording rule."""
    rules: list[dict[str, Any]] = []
    for i, expr in enumerate(_dashboard_exprs()):
        concrete = expr.replace("$__rate_interval", "5m").replace("$service", ".*").replace("$region", ".*")
        rules.append({"record": f"dashboard:panel_{i}", "expr": concrete})
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = _promtool("check", "rules", str(tmp_path / "dashboard.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_and_rules_name_only_metrics_bifrost_exports() -> None:
    used = set().union(*map(_names, _dashboard_exprs()))
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            used |= _names(rule["expr"])
    assert used, "no bifrost_* metric found: the name pattern is wrong"
    assert used <= EXPORTED, f"not defined in common/metrics.py: {sorted(used - EXPORTED)}"
    shown = set().union(*map(_names, _dashboard_exprs()))
    assert EXPORTED <= shown, f"exported but on no dashboard panel: {sorted(EXPORTED - shown)}"


def test_worker_pods_are_scraped_on_the_port_the_worker_serves() -> None:
    (deployment,) = find("Deployment", "bifrost-worker", "bifrost")
    template = deployment["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    (container,) = template["spec"]["containers"]
    args = container["args"]
    port = args[args.index("--metrics-port") + 1]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == port
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0"  # reachable from Prometheus, not only the pod
    assert {"name": "metrics", "containerPort": int(port), "protocol": "TCP"} in container["ports"]


@pytest.mark.parametrize("name", sorted(EXPORTED))
def test_metric_names_follow_prometheus_conventions(name: str) -> None:
    assert re.fullmatch(r"bifrost_[a-z]+(_[a-z]+)*", name), name
    if name in metrics.BUCKETS:
        assert name.endswith("_seconds"), f"{name}: a histogram of durations names its unit"
    assert not name.endswith("_total") or name not in metrics.BUCKETS
