"""CloudWatch metric source over boto3 GetMetricData: one metric query per side, one datapoint per period.

Same contract as the Prometheus source: no datapoints is an empty list, a short series is a short list.
Throttling and server errors are retried (by botocore, then by the activity); bad queries are not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ParamValidationError

from activities.adapters.aws import CREDENTIAL_CODES, PERMISSION_CODES, AwsConnection, aws_error, aws_status, lazy_aws_client
from activities.adapters.base import MetricsError
from activities.adapters.lazy import LazyClient
from canary.config import MetricSamples, MetricSpec
from common.types import MetricWindow, Role, StageRef

log = logging.getLogger(__name__)

PLACEHOLDERS = ("service", "version", "region", "environment", "role")
_BAD_QUERY = {"InvalidParameterValue", "InvalidParameterCombination", "MissingParameter", "ValidationError", "InvalidNextToken"}
_NON_RETRYABLE = _BAD_QUERY | PERMISSION_CODES | CREDENTIAL_CODES
_PERMISSION_HINT = "grant cloudwatch:GetMetricData to the worker's IAM role"


@dataclass(frozen=True)
class CloudWatchMetric:
    """One CloudWatch metric; dimension values may use {service}, {version}, {region}, {environment}, {role}."""

    namespace: str
    metric_name: str
    dimensions: dict[str, str] = field(default_factory=dict)
    statistic: str = "Average"
    period_seconds: int | None = None  # default: the window's interval
    unit: str | None = None


@dataclass(frozen=True)
class CloudWatchSettings:
    metrics: dict[str, CloudWatchMetric]
    aws_region: str | None = None  # default: the stage's region
    connection: AwsConnection = field(default_factory=AwsConnection)


def valid_period(seconds: int) -> bool:
    """CloudWatch periods: 1, 5, 10, 30 (high resolution) or a multiple of 60."""
    return seconds in (1, 5, 10, 30) or (seconds > 0 and seconds % 60 == 0)


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for name in PLACEHOLDERS:
        out = out.replace("{" + name + "}", values[name])
    return out


class CloudWatchSource:
    """MetricSource reading per-period statistics from CloudWatch."""

    def __init__(self, settings: CloudWatchSettings, *, client_factory: Callable[[str], Any] | None = None) -> None:
        self.settings = settings
        self._factory = client_factory or (lambda region: settings.connection.client("cloudwatch", region))
        self._clients: dict[str, LazyClient[Any]] = {}

    def _client(self, region: str) -> Any:
        """One client per region, made on first use (boto3 sessions are not thread-safe; clients are)."""
        factory = self._factory
        lazy = self._clients.setdefault(region, lazy_aws_client(lambda: factory(region), f"CloudWatch ({region})",
                                                                MetricsError))
        return lazy.get()

    async def fetch(
        self,
        stage: StageRef,
        metric: MetricSpec,
        window: MetricWindow,
        baseline: tuple[Role, str | None],
        canary: tuple[Role, str],
    ) -> MetricSamples:
        spec = self.settings.metrics.get(metric.name)
        if spec is None:
            raise MetricsError(
                f"could not read {metric.name} in {stage.key}", status=f"no CloudWatch metric configured for {metric.name!r}",
                detail=f"have: {', '.join(sorted(self.settings.metrics)) or 'none'}",
                hint="add it under metrics.metrics in the targets file", retryable=False,
            )
        period = spec.period_seconds or window.interval_seconds
        if not valid_period(period):
            raise MetricsError(f"could not read {metric.name} in {stage.key}", status=f"invalid CloudWatch period {period}s",
                               hint="use 1, 5, 10, 30 or a multiple of 60 (set period_seconds or the canary interval)",
                               retryable=False)
        if window.end <= window.start:
            return MetricSamples(name=metric.name, baseline=[], canary=[])
        sides = {"baseline": baseline, "canary": canary}
        queries = []
        for qid, (role, version) in sides.items():
            if version is None:
                continue
            values = {"service": stage.service, "version": version, "region": stage.region,
                      "environment": stage.environment, "role": role}
            stat: dict[str, Any] = {
                "Metric": {
                    "Namespace": spec.namespace, "MetricName": spec.metric_name,
                    "Dimensions": [{"Name": k, "Value": _fill(v, values)} for k, v in spec.dimensions.items()],
                },
                "Period": period, "Stat": spec.statistic,
            }
            if spec.unit:
                stat["Unit"] = spec.unit
            queries.append({"Id": qid, "MetricStat": stat, "ReturnData": True})
        region = self.settings.aws_region or stage.region
        failed = f"could not read {metric.name} in {stage.key}"
        target = f"GetMetricData {spec.namespace}/{spec.metric_name} in {region}"
        points = await asyncio.to_thread(self._get_metric_data, region, queries, window.start, window.end, failed, target)
        return MetricSamples(name=metric.name, baseline=points.get("baseline", []), canary=points.get("canary", []))

    def _get_metric_data(self, region: str, queries: list[dict[str, Any]], start: datetime, end: datetime,
                         failed: str, target: str) -> dict[str, list[float]]:
        client = self._client(region)
        collected: dict[str, list[tuple[datetime, float]]] = {q["Id"]: [] for q in queries}
        kwargs: dict[str, Any] = dict(MetricDataQueries=queries, StartTime=start, EndTime=end, ScanBy="TimestampAscending")
        try:
            while True:
                resp = client.get_metric_data(**kwargs)
                for result in resp.get("MetricDataResults", []):
                    status = result.get("StatusCode", "Complete")
                    messages = "; ".join(m.get("Value", "") for m in result.get("Messages", []))
                    if status == "InternalError":
                        raise MetricsError(failed, target=target, status=f"InternalError for the {result['Id']}",
                                           detail=messages, hint="CloudWatch failed; the activity will be retried",
                                           retryable=True)
                    if status == "Forbidden":
                        raise MetricsError(failed, target=target, status=f"Forbidden for the {result['Id']}",
                                           detail=messages, hint=_PERMISSION_HINT, retryable=False)
                    if status == "PartialData" and not resp.get("NextToken"):
                        log.info("%s %s: CloudWatch returned partial data (%s)", target, result["Id"], messages)
                    collected[result["Id"]].extend(zip(result.get("Timestamps", []), result.get("Values", [])))
                token = resp.get("NextToken")
                if not token:
                    break
                kwargs["NextToken"] = token
        except ClientError as err:
            code, msg, http = aws_error(err)
            raise MetricsError(failed, target=target, status=aws_status(code, http), detail=msg, hint=_client_hint(code),
                               retryable=code not in _NON_RETRYABLE) from err
        except NoCredentialsError as err:
            raise MetricsError(failed, target=target, status="no AWS credentials",
                               hint="configure a role or profile for the worker, or access_key_id_env/"
                                    "secret_access_key_env in the targets file", retryable=False) from err
        except ParamValidationError as err:
            raise MetricsError(failed, target=target, status="invalid parameters", detail=str(err),
                               hint="fix the CloudWatch metric in the targets file", retryable=False) from err
        except BotoCoreError as err:  # connection errors, timeouts
            raise MetricsError(failed, target=target, status="cannot reach CloudWatch", detail=f"{type(err).__name__}: {err}",
                               hint="check endpoint_url and the network from the worker; the activity will be retried",
                               retryable=True) from err
        return {qid: [v for _, v in sorted(pts, key=lambda p: p[0])] for qid, pts in collected.items()}


def _client_hint(code: str) -> str:
    """What to do about a GetMetricData error code."""
    if code in PERMISSION_CODES:
        return _PERMISSION_HINT
    if code in CREDENTIAL_CODES:
        return ("AWS rejected the worker's credentials; check its role or profile, or the access key variables in the "
                "targets file")
    if code in _BAD_QUERY:
        return "check the namespace, metric, dimensions, statistic and unit of this metric in the targets file"
    return "CloudWatch is throttling or failing; the activity will be retried"
