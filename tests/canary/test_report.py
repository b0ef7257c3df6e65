"""The HTML report: self-contained, an ECDF and a time series per metric, verdict, score and the metric table."""

from __future__ import annotations

import base64
import html
import re

import numpy as np
import pytest

from canary.config import JudgeConfig, MetricSamples, MetricSpec
from canary.judge import judge, soak_look
from canary.report import render_html, render_soak_html


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


def _plots(page: str) -> dict[str, list[str]]:
    """Per plot kind, the metric names that have one, in page order, after checking each payload is a PNG."""
    found: dict[str, list[str]] = {"ECDF": [], "Time series": []}
    for kind, name, payload in re.findall(
            r"<img alt='(ECDF|Time series) of ([^:]+): baseline vs canary' src='data:image/png;base64,([^']+)'>", page):
        assert base64.b64decode(payload).startswith(b"\x89PNG\r\n\x1a\n")
        found[kind].append(name)
    return found


def test_each_metric_has_an_ecdf_and_a_time_series_side_by_side() -> None:
    specs, data, _ = _analysis("bifrost")
    result = judge(JudgeConfig(), specs, data)
    page = render_html(result, specs, data, title="t", interval_seconds=30)
    assert _plots(page) == {"ECDF": [s.name for s in specs], "Time series": [s.name for s in specs]}
    for s in specs:  # the two plots of a metric sit together in its section
        section = page.split(f"<section id='m-{s.name}'>")[1].split("</section>")[0]
        assert section.count("<img ") == 2 and "<div class='plots'>" in section
    # every image is its own drawing: no placeholder is reused for a missing plot
    images = re.findall(r"base64,([^']+)'", page)
    assert len(set(images)) == len(images)


def test_the_time_series_keeps_the_order_of_the_samples() -> None:
    """Same values, different order: the ECDFs are identical, the time series are not."""
    spec = [MetricSpec(name="latency")]
    rising = [float(i) for i in range(40)]
    a = [MetricSamples(name="latency", baseline=rising, canary=rising)]
    b = [MetricSamples(name="latency", baseline=rising, canary=rising[::-1])]
    result = judge(JudgeConfig(), spec, a)
    ecdf_a, series_a = re.findall(r"base64,([^']+)'", render_html(result, spec, a, title="t"))
    ecdf_b, series_b = re.findall(r"base64,([^']+)'", render_html(result, spec, b, title="t"))
    assert ecdf_a == ecdf_b and series_a != series_b


def test_a_soak_look_report_shows_the_alarm_and_both_plots() -> None:
    rng = np.random.default_rng(3)
    specs = [MetricSpec(name="error_rate", kind="error_rate"), MetricSpec(name="latency", kind="latency")]
    data = [
        MetricSamples(name="error_rate", baseline=(rng.binomial(2000, 0.005, 120) / 2000).tolist(),
                      canary=(rng.binomial(2000, 0.02, 120) / 2000).tolist()),
        MetricSamples(name="latency", baseline=rng.lognormal(5, 0.2, 120).tolist(), canary=rng.lognormal(5, 0.2, 120).tolist()),
    ]
    look = soak_look(JudgeConfig(), specs, data, look=3, max_looks=12)
    assert look.alarm  # a 4x error rate must alarm, or this test shows nothing
    page = render_soak_html(look, specs, data, title="checkout 2.0 soak in <eu-west-1>/prod")
    assert "ALARM — soak look 3 of 12" in page and "NO ALARM" not in page
    assert all(html.escape(r) in page for r in look.reasons)
    assert _plots(page) == {"ECDF": ["error_rate", "latency"], "Time series": ["error_rate", "latency"]}
    assert "&lt;eu-west-1&gt;" in page and "src='http" not in page and "<script" not in page
