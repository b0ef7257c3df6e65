"""Canary report: one self-contained HTML page per analysis (or soak look), with an ECDF and a time series per metric.

matplotlib's object API on the Agg canvas (no pyplot state), PNGs embedded as base64; returns a string. Pure and
picklable by reference, so a worker renders it in a process pool (matplotlib holds the GIL for the whole draw)."""

from __future__ import annotations

import base64
import io
import math

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from canary.config import JudgeResult, MetricResult, MetricSamples, MetricSpec, MonitorResult
from canary.findings import prepare
from common.text import html as esc

BASELINE_COLOR, CANARY_COLOR = "#4c72b0", "#dd8452"
_CLASS_COLOR = {"Pass": "#2e7d32", "High": "#c62828", "Low": "#c62828", "NodataFailMetric": "#c62828", "Nodata": "#8d6e00", "Error": "#8d6e00"}
_VERDICT_COLOR = {"pass": "#2e7d32", "marginal": "#8d6e00", "fail": "#c62828", "insufficient_data": "#8d6e00"}
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#222;max-width:1100px}
table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}.verdict{font-size:1.4rem;font-weight:700}
section{border-top:1px solid #ddd;margin-top:1.5rem;padding-top:.5rem}.muted{color:#777}img{max-width:100%}
.plots{display:flex;flex-wrap:wrap;gap:.5rem}.plots img{flex:1 1 480px;min-width:0}
"""
_FIGSIZE, _DPI = (6.4, 2.8), 80


def _png(fig: Figure) -> str:
    """The figure as a base64 PNG; fixed margins instead of tight_layout, which costs a second full draw."""
    fig.subplots_adjust(left=0.14, right=0.98, top=0.88, bottom=0.2)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.{digits}g}"


def _interval(m: MetricResult) -> str:
    if m.interval is None:
        return "–"
    level = f"{m.interval_level:.0%} " if m.interval_level else ""
    return f"{level}[{_num(m.interval[0])}, {_num(m.interval[1])}]"


def ecdf_png(name: str, baseline: np.ndarray, canary: np.ndarray, classification: str) -> str:
    """Base64 PNG of the empirical CDFs of baseline and canary, with their means marked."""
    fig = Figure(figsize=_FIGSIZE, dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for values, label, color in ((baseline, "baseline", BASELINE_COLOR), (canary, "canary", CANARY_COLOR)):
        if len(values):
            xs = np.sort(values)
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", color=color, label=f"{label} (n={len(xs)})")
            ax.axvline(float(np.mean(xs)), color=color, linestyle="--", linewidth=0.8)
        else:
            ax.plot([], [], color=color, label=f"{label}: no data")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("fraction ≤ x")
    ax.set_xlabel(f"{name} (dashed: means)")
    ax.set_title(f"{name}: {classification}", fontsize=10, color=_CLASS_COLOR.get(classification, "#222"))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def series_png(name: str, baseline: list[float], canary: list[float], interval_seconds: int | None = None) -> str:
    """Base64 PNG of baseline and canary sample by sample, in the order the source returned them (gaps: NaN)."""
    fig = Figure(figsize=_FIGSIZE, dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for values, label, color in ((baseline, "baseline", BASELINE_COLOR), (canary, "canary", CANARY_COLOR)):
        if values:
            ax.plot(np.arange(len(values)), np.asarray(values, dtype=float), color=color, linewidth=0.9,
                    marker="." if len(values) <= 60 else None, markersize=3, label=f"{label} (n={len(values)})")
        else:
            ax.plot([], [], color=color, label=f"{label}: no data")
    every = f", one per {interval_seconds} s" if interval_seconds else ""
    ax.set_xlabel(f"sample{every} (raw values; gaps: missing)")
    ax.set_ylabel(name)
    ax.set_title(f"{name} over the window", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def _metric_row(m: MetricResult) -> str:
    crit = " (critical)" if m.critical else ""
    muted = " <span class='muted'>(muted)</span>" if m.muted else ""
    effect = f"{_num(m.effect_size, 3)} {m.effect_measure or ''}".strip() if m.effect_size is not None else "–"
    return (
        f"<tr><td><a href='#m-{esc(m.name)}'>{esc(m.name)}</a>{muted}</td>"
        f"<td style='color:{_CLASS_COLOR.get(m.classification, '#222')}'><b>{m.classification}</b>{crit}</td>"
        f"<td class='num'>{_num(m.p_value, 3)}</td><td class='num'>{_num(m.threshold, 3)}</td>"
        f"<td class='num'>{_num(m.estimate)}</td><td class='num'>{_interval(m)}</td><td class='num'>{effect}</td>"
        f"<td class='num'>{f'±{m.tolerance:.0%}' if m.tolerance else '–'}</td>"
        f"<td class='num'>{m.baseline_n} / {m.canary_n}</td><td class='num'>{_num(m.baseline_mean)} / {_num(m.canary_mean)}</td>"
        f"<td>{esc(m.reason)}</td></tr>"
    )


def _method(result: JudgeResult) -> str:
    if result.mode == "kayenta":
        return (
            "Kayenta mode: a metric is High (Low) when the 98% Mann-Whitney interval for the shift lies above (below) "
            "a dead zone of ±25% of the Hodges-Lehmann estimate and the effect size reaches the allowed change. "
            "Score = weighted mean over groups of Pass / (Pass + High + Low + NodataFailMetric); a failing critical "
            "metric, or Nodata for half the metrics or more, scores 0."
        )
    return (
        "Bifrost mode: each metric is tested in its harmful direction by Mann-Whitney U and Welch's t (Simes-combined); "
        "Holm's procedure keeps the chance of any false alarm in this analysis at the configured alpha. A significant "
        "metric is High/Low only if the mean ratio (or CLES) exceeds the allowed change (default 5%). Latency metrics "
        "are also tested on their upper tail, and against the baseline scaled by their tolerance (an equivalence "
        "margin, default 3%: a smaller shift is no regression however significant). Any regressed metric fails the "
        "analysis however many others pass (unless all its groups carry explicit weights). Score = weighted "
        "mean over groups of Pass / (Pass + High + Low + NodataFailMetric); a failing critical metric scores 0; "
        "too few samples for any metric gives 'insufficient_data', never a pass."
    )


def _sections(metrics: list[MetricResult], specs: list[MetricSpec], data: list[MetricSamples],
              interval_seconds: int | None) -> str:
    """Per metric: its finding, then the ECDF and the time series of baseline vs canary side by side."""
    by_name = {d.name: d for d in data}
    spec_by_name = {s.name: s for s in specs}
    sections = []
    for m in metrics:
        spec = spec_by_name.get(m.name) or MetricSpec(name=m.name)
        raw = by_name.get(m.name) or MetricSamples(name=m.name, baseline=[], canary=[])
        base, can = prepare(spec, raw)
        ecdf = ecdf_png(m.name, base, can, m.classification)
        series = series_png(m.name, raw.baseline, raw.canary, interval_seconds)
        tests = ", ".join(f"{esc(k)} p={_num(v, 3)}" for k, v in m.tests.items())
        name = esc(m.name)
        sections.append(
            f"<section id='m-{name}'><h3>{name} — {m.classification}</h3>"
            f"<p>{esc(m.reason)}</p>"
            f"<p class='muted'>direction {esc(str(m.direction or spec.direction))}; groups {esc(', '.join(spec.groups) or 'default')}"
            f"{'; tests: ' + tests if tests else ''}</p><div class='plots'>"
            f"<img alt='ECDF of {name}: baseline vs canary' src='data:image/png;base64,{ecdf}'>"
            f"<img alt='Time series of {name}: baseline vs canary' src='data:image/png;base64,{series}'>"
            "</div></section>"
        )
    return "".join(sections)


_TABLE_HEAD = ("<h2>Metrics</h2><table><tr><th>metric</th><th>class</th><th>p-value</th><th>level</th><th>shift estimate</th>"
               "<th>interval</th><th>effect</th><th>tolerance</th><th>n base / canary</th><th>mean base / canary</th><th>reason</th></tr>")


def _page(title: str, head: str, metrics: list[MetricResult], sections: str) -> str:
    rows = "".join(_metric_row(m) for m in metrics)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>{head}{_TABLE_HEAD}{rows}</table>{sections}</body></html>"
    )


def render_html(result: JudgeResult, specs: list[MetricSpec], data: list[MetricSamples], *, title: str,
                interval_seconds: int | None = None) -> str:
    """Verdict, score, how the score was derived, a table of metrics, and per metric an ECDF and a time series."""
    groups = "".join(f"<tr><td>{esc(g)}</td><td class='num'>{s:.2f}</td></tr>" for g, s in sorted(result.group_scores.items()))
    color = _VERDICT_COLOR.get(result.verdict, "#222")
    head = (
        f"<p class='verdict' style='color:{color}'>{result.verdict.upper().replace('_', ' ')} — score {result.score:.2f}</p>"
        f"<p>{esc(result.summary)}</p>"
        f"<p class='muted'>{esc(_method(result))}</p>"
        f"<h2>Group scores</h2><table><tr><th>group</th><th>score</th></tr>{groups}</table>"
    )
    return _page(title, head, result.metrics, _sections(result.metrics, specs, data, interval_seconds))


def render_soak_html(monitor: MonitorResult, specs: list[MetricSpec], data: list[MetricSamples], *, title: str,
                     interval_seconds: int | None = None) -> str:
    """One soak look: alarm or not and why, the monitor's findings per metric, and the same two plots per metric."""
    color = _VERDICT_COLOR["fail" if monitor.alarm else "pass"]
    state = "ALARM" if monitor.alarm else "NO ALARM"
    reasons = "".join(f"<li>{esc(r)}</li>" for r in monitor.reasons)
    head = (
        f"<p class='verdict' style='color:{color}'>{state} — soak look {monitor.look} of {monitor.max_looks}</p>"
        f"<p>{esc(monitor.summary)}</p>"
        + (f"<ul>{reasons}</ul>" if reasons else "")
        + "<p class='muted'>Soak monitor: the promoted version against the baseline, over every sample since the soak "
        "started; how a look decides is described under 'Soak monitoring' in docs/judge.md.</p>"
    )
    return _page(title, head, monitor.metrics, _sections(monitor.metrics, specs, data, interval_seconds))
