"""Telemetry wiring without a server: metric labels stay bounded, gate waits are timed, logs carry the rollout's
context on one line, and the worker's options refuse what they cannot honour."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner
from temporalio.common import MetricMeter

from bifrost_cli.main import cli
from common import metrics
from worker.logs import JsonFormatter, TextFormatter, rollout_context, setup_logging
from worker.telemetry import TelemetryOptionError, metrics_runtime, telemetry, tracing_interceptor

BOUNDED = {"service", "region", "environment", "status", "gate", "outcome", "verdict", "kind", "activity"}
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


class Recorder:
    """A metric meter that records (kind, name, value, labels) for every emission."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float, dict[str, str]]] = []

    def _instrument(self, kind: str, name: str) -> Any:
        rec = self

        class Instrument:
            def add(self, value: float, attrs: dict[str, str] | None = None) -> None:
                rec.seen.append((kind, name, value, dict(attrs or {})))

            record = set = add

        return Instrument()

    def create_counter(self, name: str, description: str | None = None, unit: str | None = None) -> Any:
        return self._instrument("counter", name)

    def create_histogram_float(self, name: str, description: str | None = None, unit: str | None = None) -> Any:
        return self._instrument("histogram", name)

    def create_gauge(self, name: str, description: str | None = None, unit: str | None = None) -> Any:
        return self._instrument("gauge", name)

    def with_additional_attributes(self, attrs: dict[str, str]) -> Recorder:
        self.base = {**getattr(self, "base", {}), **attrs}  # the SDK's attributes (namespace, task queue, type)
        return self


def _emit_everything(meter: MetricMeter) -> None:
    metrics.rollout_status_changed(meter, service="payments", before="awaiting_approval", after="running",
                                   since=T0, now=T0 + timedelta(seconds=90))
    metrics.stage_ended(meter, region="eu-west-1", environment="prod", outcome="rolled_back", started=T0,
                        ended=T0 + timedelta(minutes=30))
    metrics.canary_analysed(meter, region="eu-west-1", environment="prod", verdict="fail")
    metrics.soak_looked(meter, region="eu-west-1", environment="prod", alarm=True)
    metrics.evacuation_status_changed(meter, service="payments", region="eu-west-1", before="shifting", after="evacuated")
    metrics.evacuation_step(meter, service="payments", region="eu-west-1")
    metrics.traffic_weights(meter, service="payments", environment="prod", weights={"eu-west-1": 0, "us-east-1": 100})
    metrics.report_drawn(meter, kind="canary", seconds=1.5)
    metrics.adapter_error(meter, activity="deploy_canary", kind="DeployError")


def test_every_metric_has_only_bounded_labels_and_a_known_name() -> None:
    rec = Recorder()
    _emit_everything(cast(MetricMeter, rec))
    names = {name for _, name, _, _ in rec.seen}
    exported = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str) and v.startswith("bifrost_")}
    assert names == exported, exported ^ names  # every metric emitted once here, and each one defined
    for _, name, _, labels in rec.seen:
        assert set(labels) <= BOUNDED, (name, labels)
        assert "version" not in labels and all("2.0.0" not in v for v in labels.values())


def test_traffic_weights_are_one_series_per_region_whichever_activity_read_them() -> None:
    rec = Recorder()
    rec.with_additional_attributes({"activity_type": "plan_traffic"})
    metrics.traffic_weights(cast(MetricMeter, rec), service="payments", environment="prod", weights={"eu-west-1": 0})
    assert rec.base["activity_type"] == "traffic"
    assert rec.seen == [("gauge", metrics.TRAFFIC_WEIGHT, 0, {"service": "payments", "environment": "prod", "region": "eu-west-1"})]


def test_a_gate_wait_is_timed_when_the_rollout_leaves_the_gate() -> None:
    rec = Recorder()
    metrics.rollout_status_changed(cast(MetricMeter, rec), service="payments", before="awaiting_approval", after="running",
                                   since=T0, now=T0 + timedelta(seconds=90))
    assert ("histogram", metrics.ROLLOUT_WAIT, 90.0, {"service": "payments", "gate": "approval"}) in rec.seen
    assert ("counter", metrics.ROLLOUT_STATUS_LEFT, 1, {"service": "payments", "status": "awaiting_approval"}) in rec.seen
    assert ("counter", metrics.ROLLOUT_STATUS_ENTERED, 1, {"service": "payments", "status": "running"}) in rec.seen
    again = Recorder()
    metrics.rollout_status_changed(cast(MetricMeter, again), service="payments", before="running", after="running",
                                   since=T0, now=T0)
    assert again.seen == []  # the same status set again is no transition
    first = Recorder()
    metrics.rollout_status_changed(cast(MetricMeter, first), service="payments", before=None, after="queued", since=None, now=T0)
    assert [name for _, name, _, _ in first.seen] == [metrics.ROLLOUT_STATUS_ENTERED]


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("bifrost.test", logging.INFO, __file__, 1, "deployed %s", ("canary",), None)
    for k, v in extra.items():
        setattr(record, k, v)
    return record


ACTIVITY = {"workflow_id": "rollout/payments/2.0.0/eu-west-1/prod", "attempt": 3, "activity_type": "deploy_canary"}


def test_logs_carry_the_rollout_id_stage_and_attempt() -> None:
    assert rollout_context(_record(temporal_activity=ACTIVITY)) == {
        "rollout_id": "rollout/payments/2.0.0", "stage": "eu-west-1/prod", "activity": "deploy_canary", "attempt": 3}
    assert rollout_context(_record(temporal_workflow={"workflow_id": "rollout/payments/2.0.0"})) == {
        "rollout_id": "rollout/payments/2.0.0"}
    assert rollout_context(_record()) == {}
    line = json.loads(JsonFormatter().format(_record(temporal_activity=ACTIVITY)))
    assert line["msg"] == "deployed canary" and line["rollout_id"] == "rollout/payments/2.0.0"
    assert line["stage"] == "eu-west-1/prod" and line["attempt"] == 3


def test_text_logs_are_one_line_per_event_even_with_a_traceback() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = _record(temporal_activity=ACTIVITY)
        record.exc_info = sys.exc_info()
    line = TextFormatter().format(record)
    assert "\n" not in line
    assert "deployed canary" in line and "rollout_id=rollout/payments/2.0.0" in line and "attempt=3" in line
    assert "ValueError: boom" in line


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format must be one of json, text"):
        setup_logging(log_format="xml")


def test_metrics_are_served_on_the_port_asked_for() -> None:
    runtime, address = metrics_runtime("127.0.0.1", 0)
    assert metrics_runtime(*address.split(":")[:1], int(address.rsplit(":", 1)[1]))[0] is runtime  # one per process
    body = httpx.get(f"http://{address}/metrics", timeout=5)
    assert body.status_code == 200


def test_a_taken_metrics_port_and_a_bad_otlp_endpoint_are_refused_clearly() -> None:
    _, address = metrics_runtime("127.0.0.1", 0)
    host, port = address.rsplit(":", 1)
    with pytest.raises(TelemetryOptionError, match="choose another --metrics-port"):
        metrics_runtime("localhost", int(port))  # same port, another address string: Core cannot bind it
    with pytest.raises(TelemetryOptionError, match="--otlp-endpoint must start with http:// or https://"):
        telemetry(otlp_endpoint="collector:4318")


def test_metrics_port_with_several_processes_is_a_usage_error() -> None:
    res = CliRunner().invoke(cli, ["worker", "--processes", "2", "--metrics-port", "9464"])
    assert res.exit_code == 2 and "--metrics-port serves one process's metrics" in res.output


@pytest.mark.parametrize("ratio, exported", [(None, 20), (1.0, 20), (0.0, 0)])
def test_the_sample_ratio_decides_which_traces_are_exported(ratio: float | None, exported: int) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    interceptor = tracing_interceptor(None, exporter=exporter, sample_ratio=ratio)
    for i in range(20):
        interceptor.tracer.start_span(f"root {i}").end()  # type: ignore[attr-defined]
    assert len(exporter.get_finished_spans()) == exported


def test_a_sample_ratio_out_of_range_is_refused() -> None:
    with pytest.raises(TelemetryOptionError, match="between 0 and 1"):
        tracing_interceptor(None, sample_ratio=1.5)


def test_submit_refuses_a_bad_otlp_endpoint_in_the_environment_before_it_connects() -> None:
    res = CliRunner().invoke(cli, ["submit", "deploy/examples/request.yaml"],
                             env={"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})
    assert res.exit_code == 2, res.output
    assert "OTEL_EXPORTER_OTLP_ENDPOINT must start with http:// or https://, got 'collector:4318'" in res.output


@pytest.mark.parametrize("kind, counted", [("DeployError", True), ("TrafficError", True), ("Refused", False), (None, False)])
async def test_activities_failing_on_an_adapter_error_are_counted_by_kind(kind: str | None, counted: bool) -> None:
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from worker.telemetry import _CountAdapterErrors

    class Failing:
        async def execute_activity(self, input: Any) -> Any:
            raise ApplicationError("deploy canary: 403 Forbidden on deployments/shop", type=kind)

    env, rec = ActivityEnvironment(), Recorder()
    env.metric_meter = cast(MetricMeter, rec)

    async def activity() -> None:
        with pytest.raises(ApplicationError):
            await _CountAdapterErrors(cast(Any, Failing())).execute_activity(cast(Any, None))

    await env.run(activity)
    expected = [("counter", metrics.ADAPTER_ERRORS, 1, {"activity": env.info.activity_type, "kind": kind})]
    assert rec.seen == (expected if counted else [])
