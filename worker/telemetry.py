"""Telemetry of a Bifrost process: Temporal's Prometheus endpoint, OpenTelemetry traces over OTLP, adapter error counts.

One `Runtime` per process serves `/metrics` on `--metrics-port`: the SDK's own `temporal_*` worker metrics
(task latencies, slots, sticky cache) and Bifrost's `bifrost_*` metrics (common/metrics.py), which workflows
and activities record through the same runtime's meter. Tracing uses the SDK's `TracingInterceptor`, so a
rollout is one trace from the client that starts it through its child workflows and activities.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from opentelemetry import context, trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.client import OutboundInterceptor, QueryWorkflowInput
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.exceptions import ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import (
    ActivityInboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    HandleSignalInput,
    Interceptor,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    StartNexusOperationInput,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle, ChildWorkflowHandle, NexusOperationHandle

from common import metrics
from common.failures import ADAPTER_ERROR_KINDS

OTLP_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"  # the standard variable: `bifrost worker --otlp-endpoint` defaults to it
SERVICE_NAME = "bifrost"


class TelemetryOptionError(ValueError):
    """A metrics address that cannot be bound, or a tracing option that cannot be honoured."""


@dataclass
class Telemetry:
    """What one process exports: `metrics_address` (host:port of /metrics) and/or traces to `otlp_endpoint`."""

    metrics_address: str | None = None
    otlp_endpoint: str | None = None
    runtime: Runtime | None = None
    interceptors: list[Any] = field(default_factory=list)

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.metrics_address}/metrics" if self.metrics_address else None

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `Client.connect`: the runtime that serves metrics, the tracing interceptor."""
        out: dict[str, Any] = {}
        if self.runtime is not None:
            out["runtime"] = self.runtime
        if self.interceptors:
            out["interceptors"] = list(self.interceptors)
        return out


_RUNTIMES: dict[str, Runtime] = {}  # one Runtime per process and address: Core binds the port once


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the OS's choice), for `--metrics-port 0`."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def metrics_runtime(host: str, port: int) -> tuple[Runtime, str]:
    """The process's Runtime serving Prometheus metrics on host:port (0: a free port), and the address it serves."""
    address = f"{host}:{port or free_port(host)}"
    if address in _RUNTIMES:
        return _RUNTIMES[address], address
    try:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(
            bind_address=address, durations_as_seconds=True,
            histogram_bucket_overrides={name: list(b) for name, b in metrics.BUCKETS.items()},
        )))
    except Exception as err:  # Core reports a taken port as a plain RuntimeError
        raise TelemetryOptionError(f"cannot serve metrics on {address}: {err}; choose another --metrics-port") from err
    _RUNTIMES[address] = runtime
    return runtime, address


def tracing_interceptor(otlp_endpoint: str | None, *, exporter: Any = None,
                        sample_ratio: float | None = None) -> ClientInterceptor:
    """The SDK's TracingInterceptor, with spans sent over OTLP/HTTP to `otlp_endpoint` (or to `exporter`, in tests).

    With `sample_ratio`, that share of rollouts is traced, each whole or not at all (the root's decision travels
    with the trace); without, OTEL_TRACES_SAMPLER/OTEL_TRACES_SAMPLER_ARG decide, else every rollout is traced."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    if sample_ratio is not None and not 0 <= sample_ratio <= 1:
        raise TelemetryOptionError(f"--trace-sample-ratio must be between 0 and 1, got {sample_ratio}")
    sampler = ParentBased(TraceIdRatioBased(sample_ratio)) if sample_ratio is not None else None
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}), sampler=sampler)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = otlp_endpoint.rstrip("/")
        endpoint = endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))  # flushed at exit
    return SampledTracing(provider.get_tracer("bifrost"))


def telemetry(*, metrics_port: int | None = None, metrics_host: str = "127.0.0.1",
              otlp_endpoint: str | None = None, trace_sample_ratio: float | None = None) -> Telemetry:
    """The telemetry the options ask for; nothing at all (and no cost) without them."""
    if otlp_endpoint is not None and not otlp_endpoint.startswith(("http://", "https://")):
        raise TelemetryOptionError(f"--otlp-endpoint must start with http:// or https://, got {otlp_endpoint!r}")
    out = Telemetry(otlp_endpoint=otlp_endpoint or None)
    if metrics_port is not None:
        out.runtime, out.metrics_address = metrics_runtime(metrics_host, metrics_port)
    if out.otlp_endpoint:
        out.interceptors.append(tracing_interceptor(out.otlp_endpoint, sample_ratio=trace_sample_ratio))
    return out


def client_telemetry() -> Telemetry:
    """A short-lived client's telemetry (`bifrost submit`): traced when OTEL_EXPORTER_OTLP_ENDPOINT is set, so the
    rollout's trace starts at the client; its spans are flushed when the process exits."""
    endpoint = os.environ.get(OTLP_ENV) or None
    try:
        return telemetry(otlp_endpoint=endpoint)
    except TelemetryOptionError:
        raise TelemetryOptionError(f"{OTLP_ENV} must start with http:// or https://, got {endpoint!r}") from None


# -- tracing that costs nothing for a trace the sampler dropped ---------------------------------------------------
def _sampled() -> bool:
    return bool(trace.get_current_span().get_span_context().trace_flags.sampled)


_IDS = RandomIdGenerator()


class _TracedWorkflow(TracingWorkflowInboundInterceptor):
    """The SDK's workflow interceptor with fewer spans: a workflow's own span, its children's, its updates' and its
    completion, but none for scheduling an activity and none for signals.

    Every span made in a workflow is a call out of the sandbox to the host; a 6-stage rollout made 208 spans, 91 of them
    `StartActivity:` (zero-length, at the moment of scheduling: the activity's `RunActivity:` span has its run) and
    `SignalExternalWorkflow:`/`HandleSignal:` pairs for the internal signals between Bifrost's own workflows, whose
    work the trace shows anyway (docs/benchmarks.md, telemetry cost). An activity's header carries the workflow's
    trace context, so its `RunActivity:` span sits under the span that started the workflow. Without a traced parent
    it makes no span (and so no host call) at all. It runs in the sandbox with this module's globals: `trace` is the
    host's opentelemetry, as the SDK's interceptor uses."""

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self.next.init(_TracedWorkflowOutbound(outbound, self))

    async def handle_signal(self, input: HandleSignalInput) -> None:
        with self._top_level_workflow_context(success_is_complete=False):  # what the handler starts stays in the trace
            await self.next.handle_signal(input)

    def _completed_span(self, span_name: str, **kwargs: Any) -> None:
        if trace.get_current_span() is trace.INVALID_SPAN:
            return None
        return super()._completed_span(span_name, **kwargs)


class _TracedWorkflowOutbound(WorkflowOutboundInterceptor):
    """A workflow's outbound calls: a span for each child started; activities get the trace header, no span of their
    own; signals neither (nor queries, which a workflow cannot send)."""

    def __init__(self, next: WorkflowOutboundInterceptor, root: _TracedWorkflow) -> None:
        super().__init__(next)
        self.root = root

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        input.headers = self.root._context_to_headers(input.headers)
        super().continue_as_new(input)

    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        input.headers = self.root._context_to_headers(input.headers)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> ActivityHandle[Any]:
        input.headers = self.root._context_to_headers(input.headers)
        return super().start_local_activity(input)

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> ChildWorkflowHandle[Any, Any]:
        self.root._completed_span(f"StartChildWorkflow:{input.workflow}", add_to_outbound=input,
                                  kind=trace.SpanKind.CLIENT)
        return await super().start_child_workflow(input)

    async def start_nexus_operation(self, input: StartNexusOperationInput[Any, Any]) -> NexusOperationHandle[Any]:
        # a stage in the machinery namespace stays in its rollout's trace: the context rides in the Nexus headers
        self.root._completed_span(f"StartNexusOperation:{input.service}/{input.operation_name}",
                                  add_to_outbound_str=input, kind=trace.SpanKind.CLIENT)
        return await super().start_nexus_operation(input)


class _TracedActivity(ActivityInboundInterceptor):
    """Traces an activity only when its caller sent a trace header; otherwise runs it under an unsampled parent, so
    the activity's own client calls (the lock's signal, peer queries) start no trace of their own either."""

    def __init__(self, next: ActivityInboundInterceptor, traced: ActivityInboundInterceptor, header_key: str) -> None:
        super().__init__(next)
        self.traced = traced
        self.header_key = header_key

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if self.header_key in input.headers:
            return await self.traced.execute_activity(input)
        ids = _IDS
        unsampled = trace.NonRecordingSpan(trace.SpanContext(ids.generate_trace_id(), ids.generate_span_id(),
                                                             is_remote=True, trace_flags=trace.TraceFlags(0)))
        token = context.attach(trace.set_span_in_context(unsampled))
        try:
            return await self.next.execute_activity(input)
        finally:
            context.detach(token)


class _UntracedQueries(OutboundInterceptor):
    """Client calls through the tracing interceptor, except queries, which go straight to the untraced client."""

    def __init__(self, traced: OutboundInterceptor, plain: OutboundInterceptor) -> None:
        super().__init__(traced)
        self.plain = plain

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await self.plain.query_workflow(input)


class SampledTracing(TracingInterceptor):
    """The SDK's TracingInterceptor, except that a trace its sampler dropped propagates nothing further.

    With `--trace-sample-ratio` most rollouts are not traced, yet the stock interceptor still sends a trace header with
    every activity, child, signal and query, decodes it on the other side and makes a non-recording span there
    (docs/benchmarks.md, telemetry cost). Here an unsampled client call sends no header; a workflow without one makes
    no spans and sends none; an activity without one runs untraced. A sampled rollout is traced as before, except
    that queries are not: a query changes nothing, and the peer queries that confirm internal signals (about ten per
    rollout, each a client span, a header and a span in the queried workflow) are already inside the trace as their
    `RunActivity:query_workflow` spans, and that workflows make no span for scheduling an activity or for signals
    (`_TracedWorkflow`; docs/benchmarks.md, telemetry cost)."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _UntracedQueries(super().intercept_client(next), next)

    def _context_to_headers(self, headers: Mapping[str, Payload]) -> Mapping[str, Payload]:
        return super()._context_to_headers(headers) if _sampled() else headers

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TracedActivity(next, super().intercept_activity(next), self.header_key)

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)
        return _TracedWorkflow


# -- adapter errors by kind ----------------------------------------------------------------------------------------
class _CountAdapterErrors(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except ApplicationError as err:
            if err.type in ADAPTER_ERROR_KINDS:
                metrics.adapter_error(activity.metric_meter(), activity=activity.info().activity_type, kind=err.type)
            raise


class MetricsInterceptor(Interceptor):
    """Counts activities that fail on an adapter error (`bifrost_adapter_errors_total{activity, kind}`)."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CountAdapterErrors(next)


def worker_interceptors() -> Sequence[Interceptor]:
    return [MetricsInterceptor()]
