"""Analysis activities: fetch metrics for both sides, run the judge or the soak monitor, write the report.

Both heartbeat while they run (see activities/heartbeat.py), and the judge and the report run in a thread,
so a slow metrics source or a large report never hides a live worker from Temporal or a dead one for long."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from temporalio import activity

from activities.adapters.registry import AdapterRegistry
from activities.errors import reports_adapter_errors
from activities.heartbeat import heartbeating
from activities.models import AnalysisInput, AnalysisResult, SoakCheckInput, SoakCheckResult
from canary import judge, report
from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef


class AnalysisActivities:
    """Holds the adapter registry and the folder where canary reports are written."""

    def __init__(self, registry: AdapterRegistry, reports_dir: str | Path = ".bifrost/reports") -> None:
        self.registry = registry
        self.reports_dir = Path(reports_dir)

    async def _fetch(
        self,
        stage: StageRef,
        metrics: list[MetricSpec],
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> list[MetricSamples]:
        source = self.registry.metrics(stage)
        return list(await asyncio.gather(*(source.fetch(stage, m, window, baseline, canary) for m in metrics)))

    @activity.defn
    @reports_adapter_errors
    async def analyze_canary(self, inp: AnalysisInput) -> AnalysisResult:
        """Judge the canary against the baseline over the analysis window and write its HTML report."""
        async with heartbeating(f"judge canary {inp.canary_version} in {inp.stage.key}"):
            data = await self._fetch(
                inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version), (inp.canary_role, inp.canary_version)
            )
            result = await asyncio.to_thread(judge.judge, inp.judge, inp.metrics, data)
            path = self.reports_dir / _safe(inp.rollout_id) / f"{_safe(inp.analysis_id)}.html"
            title = f"{inp.stage.service} {inp.canary_version} vs {inp.baseline_version} in {inp.stage.key}"
            html = await asyncio.to_thread(report.render_html, result, inp.metrics, data, title=title)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(html)
        return AnalysisResult(result=result, report_path=str(path.resolve()))

    @activity.defn
    @reports_adapter_errors
    async def soak_check(self, inp: SoakCheckInput) -> SoakCheckResult:
        """One look of the soak monitor: the promoted primary against the baseline, over the soak so far."""
        async with heartbeating(f"soak check {inp.look}/{inp.max_looks} in {inp.stage.key}"):
            data = await self._fetch(
                inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version), ("primary", inp.canary_version)
            )
            look = await asyncio.to_thread(judge.soak_look, inp.judge, inp.metrics, data, look=inp.look, max_looks=inp.max_looks)
        return SoakCheckResult(monitor=look)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)
