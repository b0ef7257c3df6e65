"""Soak monitoring: repeated looks at the metrics without inflating false alarms.

This first version splits the error budget evenly over the planned looks (Bonferroni).
"""

from __future__ import annotations

from canary.config import JudgeConfig, MetricSamples, MetricSpec, MonitorResult
from canary import judge as judge_mod

OVERALL_ALPHA = 0.01


def soak_look(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples], *, look: int, max_looks: int) -> MonitorResult:
    """Judge the soak so far; alarm if any metric regresses at the per-look level."""
    by_name = {d.name: d for d in data}
    per_look = OVERALL_ALPHA / max(1, max_looks)
    results, reasons = [], []
    for spec in specs:
        samples = by_name.get(spec.name, MetricSamples(name=spec.name, baseline=[], canary=[]))
        r = judge_mod.classify(spec, samples, config.min_samples)
        if r.classification in ("High", "Low") and (r.p_value or 1.0) < per_look and not spec.muted:
            reasons.append(f"{spec.name}: {r.reason}")
        results.append(r)
    summary = f"look {look}/{max_looks}: " + ("ALARM — " + "; ".join(reasons) if reasons else "healthy")
    return MonitorResult(alarm=bool(reasons), look=look, max_looks=max_looks, reasons=reasons, metrics=results, summary=summary)
