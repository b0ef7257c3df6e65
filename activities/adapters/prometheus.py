"""Prometheus metric source over httpx: one query_range per side, one sample per step.

Empty results come back as empty lists, NaN points as NaN and short series as short lists: the judge
decides what missing data means. Transport errors and 5xx are retried with backoff; 4xx are not.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from activities.adapters.base import MetricsError, http_status, one_line
from activities.adapters.retry import Backoff, retrying
from activities.adapters.secrets import SecretError, remember_url_credentials, resolve_secret
from canary.config import MetricSamples, MetricSpec
from canary.guard_counts import Histogram
from common.types import MetricWindow, Role, StageRef

log = logging.getLogger(__name__)


class _Overloaded(Exception):
    """Prometheus answered 429 or 5xx: worth another try (`retrying` turns it into a MetricsError)."""

    def __init__(self, resp: httpx.Response) -> None:
        super().__init__(resp.status_code)
        self.resp = resp

PLACEHOLDERS = ("service", "version", "region", "environment", "role")
MAX_POINTS = 11_000  # Prometheus refuses query_range with more points per series


@dataclass(frozen=True)
class PrometheusSettings:
    """Where Prometheus is and one PromQL template per metric name (placeholders: see PLACEHOLDERS)."""

    url: str
    queries: dict[str, str]
    token_env: str | None = None  # bearer token, e.g. for a managed Prometheus behind a proxy
    step_seconds: int | None = None  # default: the window's interval
    timeout_seconds: float = 10.0
    max_attempts: int = 3
    backoff_seconds: float = 0.5
    headers: dict[str, str] = field(default_factory=dict)
    histograms: dict[str, tuple[str, float]] = field(default_factory=dict)  # metric -> (bucket query, quantile)


def _promql_string(value: str) -> str:
    """Escape a value for use inside a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_query(template: str, **values: str) -> str:
    """Fill {service}, {version}, {region}, {environment}, {role}; other braces are PromQL and stay as they are."""
    out = template
    for name in PLACEHOLDERS:
        out = out.replace("{" + name + "}", _promql_string(values[name]))
    return out


def public_url(url: str) -> str:
    """`url` without user:password, so it can appear in messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")


def unknown_placeholders(template: str) -> list[str]:
    """`{word}` tokens that look like placeholders but are not ones we fill (a bare `{word}` is never valid PromQL)."""
    return sorted({m for m in re.findall(r"\{([A-Za-z_]+)\}", template) if m not in PLACEHOLDERS})


class PrometheusSource:
    """MetricSource reading samples from one Prometheus server."""

    def __init__(self, settings: PrometheusSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._transport = transport
        remember_url_credentials(settings.url)  # httpx sends its userinfo as basic auth, which a server may echo

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", **self.settings.headers}
        if self.settings.token_env:
            try:
                token = resolve_secret(self.settings.token_env, f"Prometheus at {self.settings.url}")
            except SecretError as err:
                raise MetricsError(str(err), retryable=False) from err
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def fetch(
        self,
        stage: StageRef,
        metric: MetricSpec,
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> MetricSamples:
        template = self.settings.queries.get(metric.name)
        if template is None:
            raise MetricsError(
                f"could not read {metric.name} in {stage.key}", status=f"no PromQL template for metric {metric.name!r}",
                detail=f"have: {', '.join(sorted(self.settings.queries)) or 'none'}",
                hint="add one under metrics.queries in the targets file", retryable=False,
            )
        step = self.settings.step_seconds or window.interval_seconds
        start, end = window.start.timestamp(), window.end.timestamp()
        if end <= start:
            return MetricSamples(name=metric.name, baseline=[], canary=[])
        if (end - start) / step > MAX_POINTS:
            raise MetricsError(
                f"could not read {metric.name} in {stage.key}", status="too many points",
                detail=f"a window of {end - start:.0f}s at step {step}s exceeds Prometheus' {MAX_POINTS} points per series",
                hint="use a larger canary interval or step_seconds in the targets file", retryable=False,
            )
        headers = self._headers()
        async with httpx.AsyncClient(
            base_url=self.settings.url.rstrip("/"), timeout=self.settings.timeout_seconds,
            headers=headers, transport=self._transport,
        ) as client:

            async def side(role: Role, version: str | None) -> list[float]:
                if version is None:
                    return []
                query = render_query(template, service=stage.service, version=version, region=stage.region,
                                     environment=stage.environment, role=role)
                values: list[float] = await self._query_range(client, query, start, end, step,
                                                              f"could not read {metric.name} of the {role} "
                                                              f"{version} in {stage.key}")
                expected = int((end - start) // step) + 1
                if values and len(values) < expected:
                    log.info("%s %s %s: partial data, %d of %d points", stage.key, metric.name, role, len(values), expected)
                return values

            b, c = await asyncio.gather(side(*baseline), side(*canary))
        return MetricSamples(name=metric.name, baseline=b, canary=c)

    async def fetch_histogram(self, stage: StageRef, metric: MetricSpec, window: MetricWindow, role: Role,
                              version: str) -> Histogram | None:
        """A latency metric's buckets per step (None: no bucket query for it). The query returns one series per
        `le` with the requests of each step (e.g. sum by (le) (increase(..._bucket{...}[3s]))): cumulative by `le`
        as Prometheus keeps them, turned into per-bucket counts; a step some `le` lacks is left out."""
        conf = self.settings.histograms.get(metric.name)
        if conf is None:
            return None
        template, quantile = conf
        step = self.settings.step_seconds or window.interval_seconds
        start, end = window.start.timestamp(), window.end.timestamp()
        failed = f"could not read the buckets of {metric.name} of the {role} {version} in {stage.key}"
        if end <= start or (end - start) / step > MAX_POINTS:
            return None if end <= start else self._too_many(metric, stage, end - start, step)
        query = render_query(template.replace("{step}", f"{step}s"), service=stage.service, version=version,
                             region=stage.region, environment=stage.environment, role=role)
        longest = max((_seconds(n, unit) for n, unit in re.findall(r"\[(\d+)([smhd])\]", query)), default=0)
        if longest > step:
            raise MetricsError(failed, status=f"a range of {longest}s over steps of {step}s",
                               detail=f"each request would count in {longest // step} steps; query: {query}",
                               hint=f"use [{{step}}] in histograms.{metric.name}.query in the targets file",
                               retryable=False)
        async with httpx.AsyncClient(base_url=self.settings.url.rstrip("/"), timeout=self.settings.timeout_seconds,
                                     headers=self._headers(), transport=self._transport) as client:
            series = await self._query_range(client, query, start, end, step, failed, many=True)
        return buckets_of(series, quantile, failed, query)

    def _too_many(self, metric: MetricSpec, stage: StageRef, seconds: float, step: int) -> Histogram:
        raise MetricsError(f"could not read {metric.name} in {stage.key}", status="too many points",
                           detail=f"a window of {seconds:.0f}s at step {step}s exceeds Prometheus' {MAX_POINTS} points",
                           hint="use a larger interval or step_seconds in the targets file", retryable=False)

    async def _query_range(self, client: httpx.AsyncClient, query: str, start: float, end: float, step: int,
                           failed: str, many: bool = False) -> Any:
        s = self.settings
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        target = f"POST {public_url(s.url)}/api/v1/query_range"

        async def call() -> Any:
            resp = await client.post("/api/v1/query_range", data=params)
            if resp.status_code >= 500 or resp.status_code == 429:
                raise _Overloaded(resp)
            return self._parse(resp, query, failed, target, many)

        def failure(err: Exception, attempt: int) -> MetricsError:
            if isinstance(err, _Overloaded):
                return MetricsError(
                    failed, target=target, status=http_status(err.resp.status_code), detail=_error_text(err.resp),
                    hint=f"Prometheus is overloaded or failing ({attempt} attempts); the activity will be retried")
            if isinstance(err, httpx.TimeoutException):
                return MetricsError(
                    failed, target=target, status=f"no answer within {s.timeout_seconds:g}s",
                    hint=f"Prometheus is slow or unreachable ({attempt} attempts); the activity will be retried; if "
                         "this persists, raise timeout_seconds or make the query cheaper")
            return MetricsError(
                failed, target=target, status="connection failed", detail=f"{type(err).__name__}: {err}",
                hint=f"cannot reach Prometheus ({attempt} attempts); check its url in the targets file and the "
                     "network from the worker; the activity will be retried")

        return await retrying(call, retry_on=(_Overloaded, httpx.TransportError), failure=failure,
                              backoff=Backoff(attempts=s.max_attempts, first_seconds=s.backoff_seconds),
                              note=lambda last, attempt, _: f"{last.status}; retry {attempt}", logger=log)

    def _parse(self, resp: httpx.Response, query: str, failed: str, target: str, many: bool = False) -> Any:
        status = http_status(resp.status_code)
        if resp.status_code in (401, 403):
            raise MetricsError(failed, target=target, status=status, detail=_error_text(resp),
                               hint="Prometheus refused the worker; check token_env (or headers) for Prometheus in the "
                                    "targets file", retryable=False)
        if resp.status_code == 404:
            raise MetricsError(failed, target=target, status=status,
                               hint="check the Prometheus url in the targets file: it must be the server root, not a "
                                    "UI page", retryable=False)
        try:
            body: dict[str, Any] = resp.json()
        except ValueError:
            raise MetricsError(failed, target=target, status=f"{status}, not JSON", detail=one_line(resp.text, 120),
                               hint="check the Prometheus url in the targets file", retryable=False) from None
        if resp.status_code >= 400 or body.get("status") != "success":
            raise MetricsError(
                failed, target=target, status=f"{status} {body.get('errorType') or 'error'}",
                detail=f"{body.get('error') or 'no error text'}; query: {query}",
                hint="fix the PromQL template in the targets file", retryable=False,
            )
        data = body.get("data") or {}
        if data.get("resultType") != "matrix":
            raise MetricsError(failed, target=target, status=f"resultType {data.get('resultType')!r}, not a matrix",
                               detail=f"query: {query}", hint="the query must be a range vector expression; fix the "
                               "PromQL template in the targets file", retryable=False)
        series = data.get("result") or []
        if many:
            return series
        if len(series) > 1:
            labels = "; ".join(str(s.get("metric")) for s in series[:3])
            raise MetricsError(
                failed, target=target, status=f"{len(series)} series", detail=f"{labels}...; query: {query}",
                hint="the query must return one series per side; aggregate it (e.g. sum(...), or histogram_quantile "
                     "over sum by (le)) in the targets file",
                retryable=False,
            )
        if not series:
            return []
        values = [_to_float(v) for _, v in series[0].get("values") or []]
        nan = sum(math.isnan(v) for v in values)
        if nan:
            log.info("%d of %d points are NaN for query %s", nan, len(values), query)
        return values


def buckets_of(series: list[dict[str, Any]], quantile: float, failed: str, query: str) -> Histogram | None:
    """Prometheus' cumulative `le` series (one per bound, +Inf included) as per-step, per-bucket request counts."""
    by_le: dict[float, dict[float, float]] = {}
    for s in series:
        le = (s.get("metric") or {}).get("le")
        try:
            bound = float(str(le))
        except (TypeError, ValueError):
            raise MetricsError(failed, status="not a bucket series", detail=f"a series without a numeric le label "
                               f"({s.get('metric')}); query: {query}", hint="the bucket query must keep `le`: "
                               "sum by (le) (increase(..._bucket{...}[step]))", retryable=False) from None
        by_le[bound] = {float(t): _to_float(v) for t, v in s.get("values") or []}
    bounds = sorted(by_le)
    if not bounds:
        return None
    if bounds[-1] != math.inf:
        raise MetricsError(failed, status="no +Inf bucket", detail=f"query: {query}", retryable=False,
                           hint="the bucket query must return every le of the histogram, +Inf included")
    steps = sorted(set.intersection(*(set(v) for v in by_le.values())))
    rows = []
    for t in steps:
        cum = [by_le[b][t] for b in bounds]
        if not all(math.isfinite(c) for c in cum):
            continue
        cum = [max(cum[: i + 1]) for i in range(len(cum))]  # rate() noise can break monotony: counts never go down
        rows.append([max(0.0, c - (cum[i - 1] if i else 0.0)) for i, c in enumerate(cum)])
    return Histogram(le=bounds[:-1], counts=rows, quantile=quantile) if len(bounds) > 1 else None


def _seconds(n: str, unit: str) -> int:
    return int(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def _to_float(value: str) -> float:
    return float(value)  # Prometheus encodes NaN and ±Inf as "NaN", "+Inf", "-Inf", which float() reads


def _error_text(resp: httpx.Response) -> str:
    """Prometheus' own `errorType: error` from a JSON error body, else the start of the body."""
    try:
        body = resp.json()
        return f"{body.get('errorType', '')}: {body.get('error', '')}".strip(": ")
    except ValueError:
        return one_line(resp.text, 120)  # redacted before it is cut, so no half a secret survives
