"""Analysis activities: fetch metrics for both sides, run the judge or the soak monitor, render and store reports.

The verdict never waits for a picture: `analyze_canary` and `soak_check` only judge and name the report's
URL; `render_report` fetches the same window again and draws the page in the worker's process pool, so
matplotlib never holds the event loop (or the GIL) of the process that runs workflows and activities.
All three heartbeat while they work (activities/heartbeat.py), so a dead worker is noticed in seconds.
"""

from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import Executor
from pathlib import Path

from temporalio import activity

from activities.adapters.base import MetricSource, ReportError
from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore, ReportStore, report_key
from activities.errors import reports_adapter_errors
from activities.heartbeat import heartbeating
from activities.metering import meter
from activities.models import AnalysisInput, AnalysisResult, ReportInput, ReportRef, SoakCheckInput, SoakCheckResult
from canary.config import MetricSamples, MetricSpec
from common import metrics
from common.types import MetricWindow, Role, StageRef

HEARTBEAT_SECONDS = 2.0  # while a render runs; the SDK throttles heartbeats to the activity's heartbeat timeout


async def primary_before_after(source: MetricSource, stage: StageRef, metrics: list[MetricSpec], before: MetricWindow,
                               after: MetricWindow, before_version: str, after_version: str) -> list[MetricSamples]:
    """A region's primary over two windows, as baseline (`before`) and canary (`after`) samples: what a traffic health
    look judges, and what its report draws."""
    was = await asyncio.gather(*(source.fetch(stage, m, before, ("primary", None), ("primary", before_version))
                                 for m in metrics))
    now = await asyncio.gather(*(source.fetch(stage, m, after, ("primary", None), ("primary", after_version))
                                 for m in metrics))
    return [MetricSamples(name=m.name, baseline=b.canary, canary=a.canary) for m, b, a in zip(metrics, was, now)]


async def with_buckets(source: object, stage: StageRef, metrics: list[MetricSpec], window: MetricWindow,
                       baseline: tuple[Role, str | None], canary: tuple[Role, str],
                       data: list[MetricSamples]) -> list[MetricSamples]:
    """The samples with both arms' latency buckets where the source has them (Prometheus `histograms`, a simulated
    fleet with `latency_histograms`): the judge then compares the tails request by request."""
    fetch = getattr(source, "fetch_histogram", None)
    if fetch is None or baseline[1] is None:
        return data
    out = []
    for m, d in zip(metrics, data):
        if m.kind == "latency" and m.direction != "decrease":
            b, c = await asyncio.gather(fetch(stage, m, window, baseline[0], baseline[1]),
                                        fetch(stage, m, window, canary[0], canary[1]))
            if b is not None and c is not None and b.le == c.le and b.counts and c.counts:
                d = d.model_copy(update={"baseline_buckets": b, "canary_buckets": c})
        out.append(d)
    return out


def report_url(store: ReportStore | None, owner: str, analysis_id: str) -> str | None:
    """The URL a report will have, or None when the store cannot name one: a verdict is never lost to its report."""
    if store is None:
        return None
    try:
        return store.url_for(owner, analysis_id)
    except ReportError as err:
        activity.logger.warning("no report link: %s", err)
        return None


class AnalysisActivities:
    """Holds the adapter registry, the report store and the executor reports are rendered in.

    `render_pool` should be a process pool (matplotlib holds the GIL while it draws); None renders in the
    event loop's default thread pool, which keeps the loop turning but not the GIL free (tests, tools)."""

    def __init__(
        self, registry: AdapterRegistry, reports: ReportStore | str | Path = ".bifrost/reports",
        render_pool: Executor | None = None,
    ) -> None:
        self.registry = registry
        self.reports: ReportStore = reports if not isinstance(reports, (str, Path)) else LocalReportStore(reports)
        self.render_pool = render_pool

    async def _fetch(
        self,
        stage: StageRef,
        metrics: list[MetricSpec],
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> list[MetricSamples]:
        source = self.registry.metrics(stage)
        data = list(await asyncio.gather(*(source.fetch(stage, m, window, baseline, canary) for m in metrics)))
        return await with_buckets(source, stage, metrics, window, baseline, canary, data)

    @activity.defn
    @reports_adapter_errors
    async def analyze_canary(self, inp: AnalysisInput) -> AnalysisResult:
        """Decide on the canary over the analysis window (pass, fail or extend); name its report's URL, render nothing.

        An 'extend' names no report: the stage draws one for the look it acts on."""
        async with heartbeating(f"judge canary {inp.canary_version} in {inp.stage.key}"):
            data = await self._fetch(
                inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version), (inp.canary_role, inp.canary_version)
            )
            from canary import sequential  # scipy: loaded by the worker, not by every importer of the workflows

            decision = await asyncio.to_thread(
                functools.partial(sequential.decide, inp.judge, inp.metrics, data, place=inp.place, look=inp.look))
        if decision.action != "extend":  # an extended analysis is counted once, by the look that decides
            metrics.canary_analysed(meter(), region=inp.stage.region, environment=inp.stage.environment,
                                    verdict=decision.result.verdict)
        url = self._url_for(inp.rollout_id, inp.analysis_id) if decision.action != "extend" else None
        return AnalysisResult(result=decision.result, report_url=url, decision=decision)

    @activity.defn
    @reports_adapter_errors
    async def soak_check(self, inp: SoakCheckInput) -> SoakCheckResult:
        """One look of the soak monitor: the promoted primary against the baseline, over the soak so far.

        An alarming look names the URL its report will have (`render_report` with `ReportInput.for_soak_look`)."""
        async with heartbeating(f"soak check {inp.look}/{inp.max_looks} in {inp.stage.key}"):
            data = await self._fetch(
                inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version), ("primary", inp.canary_version)
            )
            from canary import judge

            look = await asyncio.to_thread(functools.partial(
                judge.soak_look, inp.judge, inp.metrics, data, look=inp.look, max_looks=inp.max_looks, place=inp.place))
        metrics.soak_looked(meter(), region=inp.stage.region, environment=inp.stage.environment, alarm=bool(look.alarm))
        url = self._url_for(inp.rollout_id, inp.report_id()) if look.alarm else None
        return SoakCheckResult(monitor=look, report_url=url)

    def _url_for(self, rollout_id: str, analysis_id: str) -> str | None:
        return report_url(self.reports, rollout_id, analysis_id)

    @activity.defn
    @reports_adapter_errors
    async def render_report(self, inp: ReportInput) -> ReportRef:
        """Fetch the analysis window again, draw the report in the render pool and store it under its fixed key.

        Safe to retry: the same input stores the same page under the same key. Heartbeats while it works."""
        activity.heartbeat("fetching metrics")
        if inp.baseline_window is not None:  # a traffic health look: the primary before the shift against after it
            data = await primary_before_after(self.registry.metrics(inp.stage), inp.stage, inp.metrics,
                                              inp.baseline_window, inp.window, inp.baseline_version or inp.canary_version,
                                              inp.canary_version)
        else:
            data = await self._fetch(
                inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version), (inp.canary_role, inp.canary_version)
            )
        from canary import judge, report  # matplotlib too: only the worker that draws needs it

        if inp.monitor is not None and inp.baseline_window is not None:
            title = (f"{inp.stage.service} {inp.canary_version} in {inp.stage.key}: health after the traffic moved "
                     f"(look {inp.monitor.look}/{inp.monitor.max_looks}), against its own window before")
            draw = functools.partial(report.render_soak_html, inp.monitor, inp.metrics, data, title=title,
                                     interval_seconds=inp.window.interval_seconds)
        elif inp.monitor is not None:
            title = (f"{inp.stage.service} {inp.canary_version} vs {inp.baseline_version} in {inp.stage.key}: "
                     f"soak look {inp.monitor.look}/{inp.monitor.max_looks}")
            draw = functools.partial(report.render_soak_html, inp.monitor, inp.metrics, data, title=title,
                                     interval_seconds=inp.window.interval_seconds)
        else:
            result = inp.result if inp.result is not None else judge.judge(inp.judge, inp.metrics, data)
            title = f"{inp.stage.service} {inp.canary_version} vs {inp.baseline_version} in {inp.stage.key}"
            draw = functools.partial(report.render_html, result, inp.metrics, data, title=title,
                                     interval_seconds=inp.window.interval_seconds)
        began = time.monotonic()
        html = await self._render(draw)
        metrics.report_drawn(meter(), kind="soak" if inp.monitor is not None else "canary", seconds=time.monotonic() - began)
        key = report_key(inp.rollout_id, inp.analysis_id)
        activity.heartbeat("storing")
        url = await self.reports.put(key, html)
        return ReportRef(url=url, key=key, size_bytes=len(html.encode("utf-8")))

    async def _render(self, draw: functools.partial[str]) -> str:
        """Run `draw` in the render pool, heartbeating until it is done (a running render cannot be interrupted)."""
        future = asyncio.get_running_loop().run_in_executor(self.render_pool, draw)
        while True:
            done, _ = await asyncio.wait({future}, timeout=HEARTBEAT_SECONDS)
            if done:
                return future.result()
            activity.heartbeat("rendering")
