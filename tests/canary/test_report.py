"""The HTML report: self-contained, one ECDF image per metric, verdict, score and the metric table."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest

from canary.config import JudgeConfig, MetricSamples, MetricSpec
from canary.judge import judge
from canary.report import render_html


def _analysis(mode: str) -> tuple[list[MetricSpec], list[MetricSamples], str]:
    rng = np.random.default_rng(0)
    specs = [
        MetricSpec(name="latency_p99", groups=["latency"]),
        MetricSpec(name="error_rate", groups=["errors"], critical=True),
        MetricSpec(name="cpu", muted=True),
        MetricSpec(name="queue_depth"),  # no data at all
    ]
    data = [
        MetricSamples(name="latency_p99", baseline=rng.lognormal(6, 0.2, 60).tolist(), canary=rng.lognormal(6.2, 0.2, 60).tolist()),
        MetricSamples(name="error_rate", baseline=(rng.binomial(2000, 0.005, 60) / 2000).tolist(), canary=(rng.binomial(2000, 0.005, 60) / 2000).tolist()),
        MetricSamples(name="cpu", baseline=rng.normal(0.5, 0.03, 60).tolist(), canary=rng.normal(0.5, 0.03, 60).tolist()),
    ]
    return specs, data, mode


@pytest.mark.parametrize("mode", ["bifrost", "kayenta"])
def test_report_has_an_image_per_metric_and_the_verdict(mode: str) -> None:
    specs, data, _ = _analysis(mode)
    result = judge(JudgeConfig(mode=mode), specs, data)  # type: ignore[arg-type]
    page = render_html(result, specs, data, title="checkout 2.0 vs 1.9 in <eu-west-1>/prod")
    images = re.findall(r"<img alt='ECDF of ([^:]+): baseline vs canary' src='data:image/png;base64,([^']+)'>", page)
    assert [name for name, _ in images] == [s.name for s in specs]
    for _, payload in images:
        assert base64.b64decode(payload).startswith(b"\x89PNG\r\n\x1a\n")
    assert "&lt;eu-west-1&gt;" in page and "<eu-west-1>" not in page  # the title is escaped
    assert result.verdict.upper().replace("_", " ") in page and f"score {result.score:.2f}" in page
    for m in result.metrics:
        assert f"id='m-{m.name}'" in page and m.classification in page
    assert "src='http" not in page and "<script" not in page  # self-contained, nothing to fetch
    assert ("dead zone" in page) == (mode == "kayenta")
