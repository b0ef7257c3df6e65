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

import httpx

from activities.adapters.base import MetricsError
from activities.adapters.secrets import SecretError, resolve_secret
from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef

log = logging.getLogger(__name__)

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


def _promql_string(value: str) -> str:
    """Escape a value for use inside a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_query(template: str, **values: str) -> str:
    """Fill {service}, {version}, {region}, {environment}, {role}; other braces are PromQL and stay as they are."""
    out = template
    for name in PLACEHOLDERS:
        out = out.replace("{" + name + "}", _promql_string(values[name]))
    return out


def unknown_placeholders(template: str) -> list[str]:
    """`{word}` tokens that look like placeholders but are not ones we fill (a bare `{word}` is never valid PromQL)."""
    return sorted({m for m in re.findall(r"\{([A-Za-z_]+)\}", template) if m not in PLACEHOLDERS})


class PrometheusSource:
    """MetricSource reading samples from one Prometheus server."""

    def __init__(self, settings: PrometheusSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._transport = transport

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
                f"{stage.key}: no PromQL template for metric {metric.name!r} (have: {', '.join(sorted(self.settings.queries))}); "
                "add one under metrics.queries in the targets file",
                retryable=False,
            )
        step = self.settings.step_seconds or window.interval_seconds
        start, end = window.start.timestamp(), window.end.timestamp()
        if end <= start:
            return MetricSamples(name=metric.name, baseline=[], canary=[])
        if (end - start) / step > MAX_POINTS:
            raise MetricsError(
                f"{stage.key}: window of {end - start:.0f}s at step {step}s exceeds Prometheus' {MAX_POINTS} points "
                "per series; use a larger interval or step_seconds",
                retryable=False,
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
                values = await self._query_range(client, query, start, end, step, f"{stage.key} {metric.name} {role} {version}")
                expected = int((end - start) // step) + 1
                if values and len(values) < expected:
                    log.info("%s %s %s: partial data, %d of %d points", stage.key, metric.name, role, len(values), expected)
                return values

            b, c = await asyncio.gather(side(*baseline), side(*canary))
        return MetricSamples(name=metric.name, baseline=b, canary=c)

    async def _query_range(self, client: httpx.AsyncClient, query: str, start: float, end: float, step: int,
                           what: str) -> list[float]:
        s = self.settings
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
        last = ""
        for attempt in range(1, s.max_attempts + 1):
            try:
                resp = await client.post("/api/v1/query_range", data=params)
            except httpx.TimeoutException:
                last = f"no answer within {s.timeout_seconds:g}s"
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if resp.status_code < 500 and resp.status_code != 429:
                    return self._parse(resp, query, what)
                last = f"HTTP {resp.status_code}: {_error_text(resp)}"
            if attempt < s.max_attempts:
                log.warning("%s: Prometheus query failed (%s), retry %d", what, last, attempt)
                await asyncio.sleep(s.backoff_seconds * 2 ** (attempt - 1))
        raise MetricsError(
            f"{what}: Prometheus at {s.url} failed {s.max_attempts} times ({last}); the activity will be retried",
            retryable=True,
        )

    def _parse(self, resp: httpx.Response, query: str, what: str) -> list[float]:
        if resp.status_code in (401, 403):
            raise MetricsError(
                f"{what}: Prometheus at {self.settings.url} refused access (HTTP {resp.status_code}); "
                "check token_env in the targets file", retryable=False)
        if resp.status_code == 404:
            raise MetricsError(
                f"{what}: {self.settings.url} has no /api/v1/query_range (HTTP 404); check the Prometheus url "
                "in the targets file (it must be the server root, not a UI page)", retryable=False)
        try:
            body: dict[str, Any] = resp.json()
        except ValueError:
            raise MetricsError(f"{what}: Prometheus answered HTTP {resp.status_code} with non-JSON "
                               f"({resp.text[:120]!r}); check the url", retryable=False) from None
        if resp.status_code >= 400 or body.get("status") != "success":
            raise MetricsError(
                f"{what}: Prometheus rejected the query (HTTP {resp.status_code} {body.get('errorType', '')}: "
                f"{body.get('error', 'no error text')}); fix the PromQL template in the targets file. Query: {query}",
                retryable=False,
            )
        data = body.get("data") or {}
        if data.get("resultType") != "matrix":
            raise MetricsError(f"{what}: expected a matrix from query_range, got {data.get('resultType')!r}", retryable=False)
        series = data.get("result") or []
        if len(series) > 1:
            labels = "; ".join(str(s.get("metric")) for s in series[:3])
            raise MetricsError(
                f"{what}: the query returned {len(series)} series ({labels}...) but must return one per side; "
                f"aggregate it (e.g. sum(...) or histogram_quantile over sum by (le)). Query: {query}",
                retryable=False,
            )
        if not series:
            return []
        values = [_to_float(v) for _, v in series[0].get("values") or []]
        nan = sum(math.isnan(v) for v in values)
        if nan:
            log.info("%s: %d of %d points are NaN", what, nan, len(values))
        return values


def _to_float(value: str) -> float:
    return float(value)  # Prometheus encodes NaN and ±Inf as "NaN", "+Inf", "-Inf", which float() reads


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        return f"{body.get('errorType', '')}: {body.get('error', '')}".strip(": ")
    except ValueError:
        return resp.text[:120]
