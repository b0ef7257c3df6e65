"""Report rendering off the hot path: analyze_canary's latency with and without drawing, and how long drawing
blocks the worker's event loop in-process, in a thread and in the worker's render pool.

No Temporal server: the activities run in temporalio's ActivityEnvironment on the simulated fleet, with the
demo's two metrics and 60 samples per side. A ticker task wakes every 5 ms; its lateness is the loop's lag.

Run: .venv/bin/python benchmarks/report_render.py [--runs N]"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from temporalio.testing import ActivityEnvironment  # noqa: E402

from activities.adapters.registry import AdapterRegistry  # noqa: E402
from activities.adapters.reports import LocalReportStore, report_key  # noqa: E402
from activities.adapters.simulated import FleetScenario, SimulatedFleet  # noqa: E402
from activities.analysis import AnalysisActivities  # noqa: E402
from activities.models import AnalysisInput, ReportInput  # noqa: E402
from canary import judge, report  # noqa: E402
from canary.config import JudgeConfig, MetricSpec  # noqa: E402
from common.types import MetricWindow, StageRef  # noqa: E402
from worker.build import RenderPool  # noqa: E402

TICK = 0.005
STALL = 0.020  # a tick this late means the loop was held: a workflow task, a heartbeat or a poll waited
METRICS = [MetricSpec(name="latency_p99", kind="latency"), MetricSpec(name="error_rate", kind="error_rate", critical=True)]


def inputs(i: int) -> AnalysisInput:
    start = datetime(2026, 3, 1, tzinfo=UTC) + timedelta(hours=i)  # a new window each run: nothing is cached
    return AnalysisInput(
        stage=StageRef(service="payments", region="eu-west-1", environment="prod"), rollout_id="rollout/payments/2.0.0",
        analysis_id=f"bench-{i}", metrics=METRICS, judge=JudgeConfig(min_samples=30),
        window=MetricWindow(start=start, end=start + timedelta(minutes=60)), baseline_version="1.9.0", canary_version="2.0.0",
    )


async def old_analyze_canary(acts: AnalysisActivities, inp: AnalysisInput) -> str:
    """What analyze_canary did before: fetch, judge, draw the page on the event loop, write it, return its path."""
    data = await acts._fetch(inp.stage, inp.metrics, inp.window, ("baseline", inp.baseline_version),
                             (inp.canary_role, inp.canary_version))
    result = judge.judge(inp.judge, inp.metrics, data)
    html = report.render_html(result, inp.metrics, data, title="bench", interval_seconds=inp.window.interval_seconds)
    assert isinstance(acts.reports, LocalReportStore)
    path = acts.reports.root / report_key(inp.rollout_id, inp.analysis_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html)
    return str(path)


async def timed(fn: Callable[[int], Awaitable[object]], runs: int) -> list[float]:
    out = []
    for i in range(runs):
        t = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - t)
    return out


async def loop_lag(work: Callable[[], Awaitable[object]]) -> tuple[float, float, float]:
    """Run `work` beside a 5 ms ticker: (wall seconds, lateness summed over ticks late by more than STALL, worst)."""
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            due = time.perf_counter() + TICK
            await asyncio.sleep(TICK)
            lags.append(max(0.0, time.perf_counter() - due))

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 4)
    lags.clear()
    t = time.perf_counter()
    await work()
    wall = time.perf_counter() - t
    done.set()
    await tick
    return wall, sum(lag for lag in lags if lag > STALL), max(lags, default=0.0)


async def main(runs: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bifrost-bench-reports-"))
    pool = RenderPool(1)
    fleet = SimulatedFleet(FleetScenario(initial_version="1.9.0", min_samples=60))
    acts = AnalysisActivities(AdapterRegistry.simulated(fleet), LocalReportStore(tmp), pool)
    env = ActivityEnvironment()
    try:
        print(f"report rendering benchmark: {len(METRICS)} metrics x 60 samples per side, {runs} runs each, one render process")
        await old_analyze_canary(acts, inputs(-1))  # warm imports and matplotlib's font cache
        await env.run(acts.analyze_canary, inputs(-1))
        t = time.perf_counter()
        await env.run(acts.render_report, ReportInput.for_canary(inputs(-2)))
        cold = time.perf_counter() - t

        before = await timed(lambda i: old_analyze_canary(acts, inputs(i)), runs)
        after = await timed(lambda i: env.run(acts.analyze_canary, inputs(i)), runs)
        renders = await timed(lambda i: env.run(acts.render_report, ReportInput.for_canary(inputs(100 + i))), runs)
        b, a, r = statistics.median(before), statistics.median(after), statistics.median(renders)
        print(f"  analyze_canary, drawing on the loop (before): median {b * 1000:7.1f} ms")
        print(f"  analyze_canary, no drawing (after):           median {a * 1000:7.1f} ms  -> {b / a:.0f}x faster, "
              f"{(b - a) * 1000:.0f} ms less per stage on the verdict's path")
        print(f"  render_report in the pool (off the path):     median {r * 1000:7.1f} ms  "
              f"(first one {cold:.2f} s: forkserver start and imports)")

        n = runs
        data = await acts._fetch(inputs(0).stage, METRICS, inputs(0).window, ("baseline", "1.9.0"), ("canary", "2.0.0"))
        result = judge.judge(JudgeConfig(min_samples=30), METRICS, data)
        draw = functools.partial(report.render_html, result, METRICS, data, title="bench", interval_seconds=60)

        async def in_loop() -> None:  # as analyze_canary did: one drawing per activity, the loop free in between
            for _ in range(n):
                draw()
                await asyncio.sleep(0)

        async def in_thread() -> None:
            for _ in range(n):
                await asyncio.to_thread(draw)

        async def in_pool() -> None:
            loop = asyncio.get_running_loop()
            for _ in range(n):
                await loop.run_in_executor(pool, draw)

        async def idle() -> None:  # the machine's own noise: the same ticker with nothing to draw
            await asyncio.sleep(figures["in the pool"][0])

        print(f"  event-loop stalls (ticks of a 5 ms ticker late by > {STALL * 1000:.0f} ms) while drawing {n} reports:")
        figures: dict[str, tuple[float, float, float]] = {}
        for name, work in (("on the loop", in_loop), ("in a thread", in_thread), ("in the pool", in_pool), ("idle", idle)):
            wall, total, worst = await loop_lag(work)
            figures[name] = (wall, total, worst)
            print(f"    {name:12s} wall {wall:6.2f} s  stalled {total * 1000:7.0f} ms ({total / wall:4.0%} of the time), "
                  f"worst tick {worst * 1000:7.1f} ms late")
        loop_total, thread_total, pool_total = (figures[k][1] for k in ("on the loop", "in a thread", "in the pool"))
        loop_worst, pool_worst = figures["on the loop"][2], figures["in the pool"][2]
        print(f"  -> stalled time: pool {pool_total / loop_total:.1%} of drawing on the loop, thread "
              f"{thread_total / loop_total:.1%} (matplotlib holds the GIL); worst tick "
              f"{loop_worst / max(pool_worst, 1e-6):.0f}x shorter in the pool")
    finally:
        pool.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    asyncio.run(main(parser.parse_args().runs))
