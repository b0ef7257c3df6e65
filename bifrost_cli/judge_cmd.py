"""`bifrost judge FILE`: judge a canary offline from a JSON file of baseline and canary samples.

Exit codes: 0 pass; 1 fail, marginal or insufficient data; 2 invalid input (the message names the field);
3 extend: with `--stage`, the evidence is inconclusive and the analysis should gather more samples.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, cast, get_args

import click
from pydantic import Field, Strict, ValidationError, model_validator
from rich.console import Console
from rich.table import Table
from rich.text import Text

from canary.config import Decision, JudgeConfig, JudgeResult, MetricSamples, MetricSpec, StagePlace, bucket_problem
from canary.histogram import Histogram
from common.loading import LoadProblem, read_text
from common.types import JudgeMode

EXIT_PASS, EXIT_NOT_PASSED, EXIT_INVALID, EXIT_EXTEND = 0, 1, 2, 3


class FileMetric(MetricSpec):
    """One metric of a judge file: its settings plus the baseline and canary samples (null or "NaN" = NaN)."""

    baseline: list[Annotated[float | None, Strict(False)]]  # samples may be written "NaN", as Kayenta exports them
    canary: list[Annotated[float | None, Strict(False)]]
    baseline_buckets: Histogram | None = None  # a latency's request counts per bucket and interval, per arm
    canary_buckets: Histogram | None = None

    @model_validator(mode="after")
    def _buckets(self) -> "FileMetric":
        problem = bucket_problem(self.baseline_buckets, self.canary_buckets)
        if problem is None and self.baseline_buckets is not None and self.kind != "latency":
            problem = f"baseline_buckets: only a latency metric is judged from buckets (this one is {self.kind})"
        if problem:
            raise ValueError(problem)
        return self


class JudgeFile(JudgeConfig):
    """The `bifrost judge` input file: the judge settings of a request's `canary.judge`, plus the samples."""

    metrics: list[FileMetric] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "JudgeFile":
        seen: set[str] = set()
        for i, m in enumerate(self.metrics):
            if m.name in seen:
                raise ValueError(f"metrics[{i}].name: metric {m.name!r} appears more than once")
            seen.add(m.name)
        return self

    def config(self, mode: JudgeMode | None) -> JudgeConfig:
        """Judge settings: the command line's mode wins over the file's."""
        return JudgeConfig.model_validate(self.model_dump(include=set(JudgeConfig.model_fields), by_alias=True)
                                          | ({"mode": mode} if mode else {}))

    def specs(self) -> list[MetricSpec]:
        return [MetricSpec.model_validate(m.model_dump(exclude={"baseline", "canary", "baseline_buckets", "canary_buckets"}))
                for m in self.metrics]

    def samples(self) -> list[MetricSamples]:
        nan = math.nan
        return [
            MetricSamples(
                name=m.name,
                baseline=[nan if v is None else v for v in m.baseline],
                canary=[nan if v is None else v for v in m.canary],
                baseline_buckets=m.baseline_buckets,
                canary_buckets=m.canary_buckets,
            )
            for m in self.metrics
        ]


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("function-after", "function-before"):
            out += f".{part}" if out else str(part)
    return out or "file"


def describe_errors(err: ValidationError) -> list[str]:
    """One line per problem, each naming the field (e.g. `metrics[2].direction: ...`)."""
    lines = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        where = _where(tuple(e["loc"]))
        lines.append(msg if msg.startswith("metrics[") else f"{where}: {msg}")
    return lines


def load(path: Path) -> JudgeFile:
    """Parse and validate a judge file; raises click.UsageError-style messages via ValueError."""
    try:
        raw = json.loads(read_text(path))  # bounded: a regular file of at most 1 MiB of UTF-8 text
    except LoadProblem as problem:
        raise ValueError(f"{path}: {problem}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}, column {err.colno}): {err.msg}") from None
    except (RecursionError, ValueError) as err:
        raise ValueError(f"{path}: not valid JSON: {'nested too deeply' if isinstance(err, RecursionError) else err}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be an object with 'metrics'")
    try:
        return JudgeFile.model_validate(raw)
    except ValidationError as err:
        raise ValueError("\n".join(describe_errors(err))) from None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def as_json(result: JudgeResult) -> dict[str, Any]:
    """The --json document: score, verdict, summary, mode and one entry per metric."""
    return {
        "score": result.score,
        "verdict": result.verdict,
        "summary": result.summary,
        "mode": result.mode,
        "metrics": [
            {
                "name": m.name,
                "classification": m.classification,
                "critical": m.critical,
                "p_value": _finite(m.p_value),
                "interval": [_finite(m.interval[0]), _finite(m.interval[1])] if m.interval else None,
                "estimate": _finite(m.estimate),
                "effect_size": _finite(m.effect_size),
                "reason": m.reason,
            }
            for m in result.metrics
        ],
    }


def decision_json(decision: Decision) -> dict[str, Any]:
    """The --json document's `decision` (with --stage): action, look, level, extension size and why."""
    return {"action": decision.action, "look": decision.look, "max_looks": decision.max_looks, "level": decision.level,
            "more_samples": decision.more_samples, "inconclusive": decision.inconclusive, "reason": decision.reason}


def parse_stage(text: str) -> StagePlace:
    """`K/N` (1-based: 1/6 is the first of six stages) as a StagePlace; ValueError naming --stage otherwise."""
    k, sep, n = text.partition("/")
    if not (sep and k.strip().isdigit() and n.strip().isdigit()):
        raise ValueError(f"--stage: expected K/N such as 1/6 (stage K of N, counting from 1), got {text!r}")
    index, stages = int(k) - 1, int(n)
    if not 1 <= index + 1 <= stages <= 1000:
        raise ValueError(f"--stage: stage {k.strip()} of {n.strip()} is not a stage of the rollout (1 <= K <= N <= 1000)")
    return StagePlace(index=index, stages=stages)


def _fmt(x: float | None) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.4g}"


def print_table(result: JudgeResult, console: Console) -> None:
    """Human output: a table of metrics, then the verdict line."""
    table = Table(title=Text(f"canary judge ({result.mode} mode)"), show_lines=False)
    for col in ("metric", "class", "p-value", "shift", "interval", "effect", "n base/canary", "reason"):
        table.add_column(col, overflow="fold")
    style = {"Pass": "green", "High": "red", "Low": "red", "NodataFailMetric": "red"}
    for m in result.metrics:
        iv = f"[{_fmt(m.interval[0])}, {_fmt(m.interval[1])}]" if m.interval else "–"
        cls = m.classification + (" (critical)" if m.critical else "")
        table.add_row(
            Text(m.name), Text(cls, style=style.get(m.classification, "yellow")), Text(_fmt(m.p_value)),
            Text(_fmt(m.estimate)), Text(iv), Text(_fmt(m.effect_size)), Text(f"{m.baseline_n}/{m.canary_n}"), Text(m.reason),
        )
    console.print(table)
    colour = "green" if result.verdict == "pass" else "red" if result.verdict == "fail" else "yellow"
    console.print(Text.assemble((result.verdict.upper(), f"bold {colour}"), f" score {result.score:.2f}"), highlight=False)
    detail = result.summary.split(" — ", 1)[1] if " — " in result.summary else ""
    if detail:  # the summary starts with the verdict and score already printed above
        console.print(detail, highlight=False, markup=False)


@click.command("judge")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--mode", type=click.Choice(list(get_args(JudgeMode))), default=None, help="Judge algorithm (default: the file's 'mode', else bifrost).")
@click.option("--json", "json_out", is_flag=True, help="Print the result as JSON instead of a table.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write an HTML report here.")
@click.option("--stage", "stage", default=None, metavar="K/N",
              help="Judge as stage K of an N-stage rollout (sequential: its share of rollout_alpha; may answer 'extend').")
@click.option("--look", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --stage: which look this is (1: the first window; 2: after one extension, ...).")
def judge(file: Path, mode: str | None, json_out: bool, report: Path | None, stage: str | None, look: int) -> None:
    """Judge a canary offline from FILE (JSON: thresholds, groups, metrics with baseline and canary samples).

    \b
    Exit codes:
      0  pass
      1  fail, marginal or insufficient data
      2  invalid input (the message names the field)
      3  extend (with --stage): inconclusive, gather more samples and judge again with --look +1
    """
    try:
        doc = load(file)
        place = parse_stage(stage) if stage is not None else None
    except ValueError as err:
        click.echo(f"invalid judge file: {err}" if not str(err).startswith("--stage") else f"invalid option: {err}", err=True)
        raise SystemExit(EXIT_INVALID) from None
    specs, data = doc.specs(), doc.samples()
    from canary.report import render_html  # scipy and matplotlib: loaded when judging, not for `bifrost --help`
    from canary.sequential import decide

    decision = decide(doc.config(cast("JudgeMode | None", mode)), specs, data, place=place, look=look)
    result = decision.result
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(render_html(result, specs, data, title=f"Canary judgement: {file.name}"))
    if json_out:
        doc_out = as_json(result) | ({"decision": decision_json(decision)} if place is not None else {})
        click.echo(json.dumps(doc_out, indent=2))
    else:
        console = Console(width=160)
        print_table(result, console)
        if place is not None:
            console.print(Text(f"{decision.action.upper()} (stage {place.index + 1}/{place.stages}): {decision.reason}"))
        if report is not None:
            click.echo(f"report: {report}")
    raise SystemExit({"pass": EXIT_PASS, "fail": EXIT_NOT_PASSED, "extend": EXIT_EXTEND}[decision.action])
