"""Canary report: one self-contained HTML page per analysis."""

from __future__ import annotations

import html

from canary.config import JudgeResult, MetricSamples, MetricSpec


def render_html(result: JudgeResult, specs: list[MetricSpec], data: list[MetricSamples], *, title: str) -> str:
    """Verdict, score and a table of metrics with their reasons."""
    rows = "".join(
        f"<tr><td>{html.escape(m.name)}</td><td>{m.classification}</td><td>{m.p_value if m.p_value is not None else ''}</td>"
        f"<td>{m.effect_size if m.effect_size is not None else ''}</td><td>{html.escape(m.reason)}</td></tr>"
        for m in result.metrics
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1><p>Verdict: <b>{result.verdict}</b>, score {result.score}</p>"
        f"<table border='1'><tr><th>metric</th><th>class</th><th>p</th><th>effect</th><th>reason</th></tr>{rows}</table>"
        "</body></html>"
    )
