"""The CloudWatch metric source against moto in server mode: data put with boto3, read back through the adapter."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from activities.adapters.aws import AwsConnection
from activities.adapters.base import MetricsError
from activities.adapters.cloudwatch import CloudWatchMetric, CloudWatchSettings, CloudWatchSource
from canary import judge
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef
from tests.integration.conftest import MotoServer, assert_one_line

pytestmark = pytest.mark.integration

STAGE = StageRef(service="checkout", region="eu-west-1", environment="prod")
LATENCY = MetricSpec(name="latency_p99", kind="latency", direction="increase")
MINUTES = 40


def put_series(moto: MotoServer, namespace: str, version: str, role: str, start: datetime, values: list[float],
               service: str) -> None:
    cw = moto.client("cloudwatch", "eu-west-1")
    data = [
        {"MetricName": "Latency", "Timestamp": start + timedelta(minutes=i), "Value": v, "Unit": "Milliseconds",
         "Dimensions": [{"Name": "Service", "Value": service}, {"Name": "Version", "Value": version},
                        {"Name": "Role", "Value": role}, {"Name": "Environment", "Value": "prod"}]}
        for i, v in enumerate(values)
    ]
    for i in range(0, len(data), 20):
        cw.put_metric_data(Namespace=namespace, MetricData=data[i:i + 20])


def source(moto: MotoServer, namespace: str, **metric: object) -> CloudWatchSource:
    spec = dict(namespace=namespace, metric_name="Latency", statistic="Average",
                dimensions={"Service": "{service}", "Version": "{version}", "Role": "{role}", "Environment": "{environment}"})
    spec.update(metric)
    conn = AwsConnection(endpoint_url=moto.endpoint, max_attempts=2, timeout_seconds=5)
    return CloudWatchSource(CloudWatchSettings(metrics={"latency_p99": CloudWatchMetric(**spec)}, connection=conn))  # type: ignore[arg-type]


@dataclass
class History:
    namespace: str
    stage: StageRef
    window: MetricWindow
    series: dict[str, list[float]]


@pytest.fixture
def history(moto_server: MotoServer, aws_credentials: None) -> History:
    """40 minutes of per-minute latency: baseline 1.0.0, healthy canary 1.1.0, slow canary 2.0.0.

    Each test gets its own service name: moto matches metrics by name and dimensions but ignores the namespace.
    """
    namespace = f"Bifrost/Test/{uuid.uuid4().hex[:8]}"
    service = f"checkout-{uuid.uuid4().hex[:6]}"
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=MINUTES + 5)
    rng = random.Random(5)
    series = {
        "1.0.0": [rng.gauss(120, 12) for _ in range(MINUTES)],
        "1.1.0": [rng.gauss(120, 12) for _ in range(MINUTES)],
        "2.0.0": [rng.gauss(180, 15) for _ in range(MINUTES)],
    }
    for version, values in series.items():
        put_series(moto_server, namespace, version, "baseline" if version == "1.0.0" else "canary", start, values, service)
    window = MetricWindow(start=start, end=start + timedelta(minutes=MINUTES), interval_seconds=60)
    return History(namespace, StageRef(service=service, region="eu-west-1", environment="prod"), window, series)


async def test_values_put_are_read_back_per_side_in_time_order(moto_server, history):
    namespace, window, series, stage = history.namespace, history.window, history.series, history.stage
    data = await source(moto_server, namespace).fetch(stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert data.baseline == pytest.approx(series["1.0.0"])
    assert data.canary == pytest.approx(series["1.1.0"])


async def test_the_judge_passes_a_healthy_canary_and_fails_a_slow_one(moto_server, history):
    namespace, window, stage = history.namespace, history.window, history.stage
    src, cfg = source(moto_server, namespace), JudgeConfig(min_samples=20)
    good = await src.fetch(stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    bad = await src.fetch(stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "2.0.0"))
    assert judge.judge(cfg, [LATENCY], [good]).verdict == "pass"
    verdict = judge.judge(cfg, [LATENCY], [bad])
    assert verdict.verdict == "fail" and verdict.metrics[0].classification == "High"


async def test_no_data_and_partial_windows(moto_server, history):
    namespace, window, series, stage = history.namespace, history.window, history.series, history.stage
    src = source(moto_server, namespace)
    none = await src.fetch(stage, LATENCY, window, ("baseline", None), ("canary", "9.9.9"))
    assert none.baseline == [] and none.canary == []
    half = MetricWindow(start=window.end - timedelta(minutes=10), end=window.end + timedelta(minutes=30), interval_seconds=60)
    partial = await src.fetch(stage, LATENCY, half, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert partial.canary == pytest.approx(series["1.1.0"][-10:])


async def test_bad_queries_are_permanent_and_server_errors_retryable(moto_server, history):
    namespace, window, stage = history.namespace, history.window, history.stage
    with pytest.raises(MetricsError) as err:  # botocore refuses an empty dimension value before sending
        await source(moto_server, namespace, dimensions={"Version": "{version}", "Cluster": ""}).fetch(
            stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert not err.value.retryable and "targets file" in str(err.value)
    with pytest.raises(MetricsError) as err:  # moto answers percentile statistics with HTTP 500
        await source(moto_server, namespace, statistic="p99").fetch(
            stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert err.value.retryable
    with pytest.raises(MetricsError) as err:
        await source(moto_server, namespace, period_seconds=45).fetch(
            stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert not err.value.retryable and "period" in str(err.value)


async def test_unreachable_endpoint_is_retryable(aws_credentials):
    conn = AwsConnection(endpoint_url="http://127.0.0.1:9", max_attempts=1, timeout_seconds=1)
    src = CloudWatchSource(CloudWatchSettings(metrics={"latency_p99": CloudWatchMetric("N", "Latency", {"V": "{version}"})},
                                              connection=conn))
    w = MetricWindow(start=datetime.now(UTC) - timedelta(minutes=30), end=datetime.now(UTC))
    with pytest.raises(MetricsError) as err:
        await src.fetch(STAGE, LATENCY, w, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert err.value.retryable and "cannot reach CloudWatch" in str(err.value)


async def test_credentials_named_in_the_targets_file_come_from_the_environment(moto_server, history, monkeypatch):
    namespace, window, series, stage = history.namespace, history.window, history.series, history.stage
    conn = AwsConnection(endpoint_url=moto_server.endpoint, access_key_id_env="TEST_AWS_KEY", secret_access_key_env="TEST_AWS_SECRET")
    metric = CloudWatchMetric(namespace, "Latency", {"Service": "{service}", "Version": "{version}", "Role": "{role}",
                                                     "Environment": "{environment}"})
    src = CloudWatchSource(CloudWatchSettings(metrics={"latency_p99": metric}, connection=conn))
    monkeypatch.delenv("TEST_AWS_KEY", raising=False)
    with pytest.raises(MetricsError) as err:
        await src.fetch(stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert not err.value.retryable and "TEST_AWS_KEY" in str(err.value)
    monkeypatch.setenv("TEST_AWS_KEY", "AKIDEXAMPLE")
    monkeypatch.setenv("TEST_AWS_SECRET", "example-secret")
    data = await CloudWatchSource(CloudWatchSettings(metrics={"latency_p99": metric}, connection=conn)).fetch(
        stage, LATENCY, window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert data.canary == pytest.approx(series["1.1.0"])


# -- one-line errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("code, http, hint, retryable", [
    ("AccessDenied", 403, "grant cloudwatch:GetMetricData to the worker's IAM role", False),
    ("InvalidClientTokenId", 403, "AWS rejected the worker's credentials", False),
    ("InvalidParameterValue", 400, "check the namespace, metric, dimensions, statistic and unit", False),
    ("Throttling", 400, "CloudWatch is throttling or failing; the activity will be retried", True),
])
async def test_aws_errors_are_one_line_with_the_error_code_and_the_fix(aws_credentials, code: str, http: int, hint: str,
                                                                        retryable: bool):
    """A real boto3 client whose answers come from botocore's Stubber: the error code, AWS's message, the HTTP status."""
    client = boto3.client("cloudwatch", region_name="eu-west-1")
    stub = Stubber(client)
    stub.add_client_error("get_metric_data", service_error_code=code, http_status_code=http,
                          service_message=f"User: arn:aws:sts::123456789012:assumed-role/bifrost-worker\nis not allowed ({code})")
    stub.activate()
    metric = CloudWatchMetric("Shop/Checkout", "Latency", {"Version": "{version}"})
    src = CloudWatchSource(CloudWatchSettings(metrics={"latency_p99": metric}), client_factory=lambda region: client)
    w = MetricWindow(start=datetime.now(UTC) - timedelta(minutes=30), end=datetime.now(UTC), interval_seconds=60)
    with pytest.raises(MetricsError) as err:
        await src.fetch(STAGE, LATENCY, w, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert_one_line(str(err.value), "could not read latency_p99 in eu-west-1/prod", f"{code} (HTTP {http}) on GetMetricData",
                    "Shop/Checkout/Latency in eu-west-1", "assumed-role/bifrost-worker is not allowed", hint)
    assert err.value.retryable is retryable and err.value.status == f"{code} (HTTP {http})"


async def test_a_server_error_from_moto_is_one_line(moto_server, history):
    with pytest.raises(MetricsError) as err:  # moto answers percentile statistics with HTTP 500
        await source(moto_server, history.namespace, statistic="p99").fetch(
            history.stage, LATENCY, history.window, ("baseline", "1.0.0"), ("canary", "1.1.0"))
    assert_one_line(str(err.value), "could not read latency_p99 in eu-west-1/prod", "500 Internal Server Error on GetMetricData",
                    "the activity will be retried")
    assert "<" not in str(err.value)  # moto's HTML error page, without its markup
