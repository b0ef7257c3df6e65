"""Tracing: one rollout is one trace, from the client that starts it through its stages' workflows and activities."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.peers import PeerActivities, PeerAnswer, PeerQuery
from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, replaced_activity, running_worker, start
from worker.converter import DATA_CONVERTER
from worker.telemetry import SampledTracing, tracing_interceptor
from workflows.models import RolloutState

NEVER_SLOW = 3600.0  # a peer read is "slow" after an hour: only a failing one makes a span


async def _traced_rollout(env: Any, task_queue: str, tmp_path: Any,
                          slow_peer_read: float = NEVER_SLOW) -> tuple[Any, RolloutState, list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    client = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  data_converter=DATA_CONVERTER,
                                  interceptors=[tracing_interceptor(None, exporter=exporter, slow_peer_read=slow_peer_read)])
    async with running_worker(client, fleet(), task_queue, tmp_path):
        handle = await start(client, make_request(), task_queue)
        result = await outcome(handle)
    return handle, result, list(exporter.get_finished_spans())


async def test_a_rollout_is_one_trace_across_client_workflows_and_activities(env, task_queue, tmp_path) -> None:
    handle, result, spans = await _traced_rollout(env, task_queue, tmp_path)
    assert result.status == "succeeded"
    root = [s for s in spans if s.name == "StartWorkflow:RolloutWorkflow" and s.attributes
            and s.attributes.get("temporalWorkflowID") == handle.id]
    assert len(root) == 1, [s.name for s in spans]
    trace_id = root[0].context.trace_id
    names = Counter(s.name for s in spans if s.context.trace_id == trace_id)
    stages = len(result.stages)
    assert names["RunWorkflow:RolloutWorkflow"] >= 1
    assert names["StartChildWorkflow:StageWorkflow"] == stages, names
    assert names["RunWorkflow:StageWorkflow"] >= stages, names
    for name in ("deploy_canary", "deploy_baseline", "analyze_canary", "promote"):
        assert names[f"RunActivity:{name}"] == stages, (name, names)
    assert names["RunActivity:request_service_lock"] >= 1, names  # the lock, through an activity's own client call
    # the peer reads that confirm internal signals: no span when fast and fine (worker/telemetry.py PEER_READS),
    # and their queries no client or handler span
    # (a read whose attempt failed, as a query left unanswered for 30 s under load can, does make one, marked an error)
    reads = [s for s in spans if s.name == "RunActivity:query_workflow"]
    assert all(s.status.status_code == StatusCode.ERROR for s in reads), [s.status for s in reads]
    assert not [n for n in names if n.startswith(("QueryWorkflow:", "HandleQuery:"))], names
    others = {s.context.trace_id for s in spans if s.attributes and s.attributes.get("temporalWorkflowID", "").startswith(handle.id)}
    assert others == {trace_id}, "a span of this rollout landed in another trace"
    # no span for scheduling an activity nor for the signals between Bifrost's own workflows (they cost a host call
    # each, docs/benchmarks.md telemetry cost): a stage's activities hang under the span that started the stage
    assert not [n for n in names if n.startswith(("StartActivity:", "SignalExternalWorkflow:", "HandleSignal:"))], names
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.name == "RunActivity:deploy_canary":
            assert span.parent is not None and by_id[span.parent.span_id].name == "StartChildWorkflow:StageWorkflow"


async def test_a_rollout_its_sampler_dropped_sends_no_trace_headers(env, task_queue, tmp_path) -> None:
    """An unsampled rollout costs no header on any call (worker/telemetry.py SampledTracing), and exports nothing."""
    from temporalio.api.enums.v1 import EventType

    exporter = InMemorySpanExporter()
    client = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  data_converter=DATA_CONVERTER,
                                  interceptors=[tracing_interceptor(None, exporter=exporter, sample_ratio=0.0)])
    async with running_worker(client, fleet(), task_queue, tmp_path):
        handle = await start(client, make_request(), task_queue)
        result = await outcome(handle)
    assert result.status == "succeeded"
    assert exporter.get_finished_spans() == ()
    events = [e async for e in env.client.get_workflow_handle(handle.id).fetch_history_events()]
    scheduled = [e.activity_task_scheduled_event_attributes for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    children = [e.start_child_workflow_execution_initiated_event_attributes for e in events
                if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]
    assert scheduled and children
    assert not any("_tracer-data" in a.header.fields for a in [*scheduled, *children])
    started = events[0].workflow_execution_started_event_attributes
    assert "_tracer-data" not in started.header.fields


def _parents(spans: list[ReadableSpan]) -> dict[tuple[str, str], set[int]]:
    """The parent span ids of each workflow run's activities other than peer reads."""
    out: dict[tuple[str, str], set[int]] = {}
    for s in spans:
        if s.name.startswith("RunActivity:") and s.name != "RunActivity:query_workflow" and s.attributes and s.parent:
            key = (str(s.attributes["temporalWorkflowID"]), str(s.attributes["temporalRunID"]))
            out.setdefault(key, set()).add(s.parent.span_id)
    return out


async def test_a_slow_peer_read_is_traced_from_its_real_start_under_its_workflow_span(env, task_queue, tmp_path) -> None:
    """With a threshold of zero every peer read counts as slow: each gets its span, back-dated to the attempt's start
    (before the activity's code ran), under the same parent as its workflow's other activities, in the one trace."""
    ran: dict[str, tuple[int, int]] = {}

    def make(original: Any) -> Any:
        async def timed(self, q: PeerQuery) -> PeerAnswer:  # type: ignore[no-untyped-def]
            began = time.time_ns()
            answer: PeerAnswer = await original(self, q)
            info = activity.info()
            ran[f"{info.workflow_id}/{info.activity_id}"] = (began, time.time_ns())
            return answer
        return timed

    with replaced_activity(PeerActivities, "query_workflow", make):
        handle, result, spans = await _traced_rollout(env, task_queue, tmp_path, slow_peer_read=0.0)
    assert result.status == "succeeded"
    reads = [s for s in spans if s.name == "RunActivity:query_workflow"]
    answered = [s for s in reads if s.status.status_code != StatusCode.ERROR]  # (an attempt can fail under load)
    assert answered and len(answered) == len(ran), (len(answered), len(ran))
    trace_id = next(s.context.trace_id for s in spans if s.name == "StartWorkflow:RolloutWorkflow")
    parents = _parents(spans)
    by_id = {s.context.span_id: s for s in spans}
    for span in reads:
        assert span.attributes is not None and span.parent is not None and span.start_time and span.end_time
        assert span.context.trace_id == trace_id
        assert span.parent.span_id in by_id, "a peer read's parent is missing from the trace"
        key = (str(span.attributes["temporalWorkflowID"]), str(span.attributes["temporalRunID"]))
        if key in parents:  # a stage or the rollout: the span its deploys, analyses and so on hang under
            assert parents[key] == {span.parent.span_id}, (key, span.parent.span_id, parents[key])
        if span not in answered:
            continue
        began, ended = ran[f"{key[0]}/{span.attributes['temporalActivityID']}"]
        assert span.start_time <= began <= ended <= span.end_time, "the span is not back-dated to the read's start"
    stage_reads = {k for k in parents if k[0] != handle.id and k in
                   {(str(s.attributes["temporalWorkflowID"]), str(s.attributes["temporalRunID"])) for s in reads if s.attributes}}
    assert stage_reads, "no stage's peer read shares its parent with the stage's deploys"


async def test_a_failing_peer_read_is_traced_and_a_fast_one_is_not(env, task_queue, tmp_path) -> None:
    """A peer read whose first attempt fails gets a span with an error status; its fast retry, and every other fast
    read, gets none."""
    failed: list[str] = []

    def make(original: Any) -> Any:
        async def flaky(self, q: PeerQuery) -> PeerAnswer:  # type: ignore[no-untyped-def]
            if not failed:
                failed.append(activity.info().workflow_id)
                raise ApplicationError("the peer's worker did not answer (test)")
            answer: PeerAnswer = await original(self, q)
            return answer
        return flaky

    with replaced_activity(PeerActivities, "query_workflow", make):
        handle, result, spans = await _traced_rollout(env, task_queue, tmp_path)
    assert result.status == "succeeded"
    reads = [s for s in spans if s.name == "RunActivity:query_workflow"]
    assert all(s.status.status_code == StatusCode.ERROR for s in reads), [s.status for s in reads]  # none for fast ones
    ours = [s for s in reads if "did not answer (test)" in (s.status.description or "")]
    assert len(ours) == 1, [s.status for s in reads]
    (span,) = ours
    assert span.attributes and span.attributes["temporalWorkflowID"] == failed[0]
    trace_id = next(s.context.trace_id for s in spans if s.name == "StartWorkflow:RolloutWorkflow")
    assert span.context.trace_id == trace_id
    assert Counter(s.name for s in spans)["RunActivity:deploy_canary"] == len(result.stages)


def test_an_activity_header_is_decoded_once_per_distinct_parent() -> None:
    """Every activity a workflow schedules carries the same header (its workflow's span): the worker decodes it and
    extracts its context once, and all of them share that immutable context (worker/telemetry.py SampledTracing)."""
    from opentelemetry import trace

    tracing = tracing_interceptor(None, exporter=InMemorySpanExporter())
    assert isinstance(tracing, SampledTracing)
    extracted: list[object] = []
    real = tracing.text_map_propagator

    class Counting:
        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            extracted.append(carrier)
            return real.extract(carrier)

        def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
            real.inject(carrier)

    tracing.text_map_propagator = Counting()  # type: ignore[assignment]
    parents = []
    for name in ("stage-a", "stage-b"):
        with tracing.tracer.start_as_current_span(name) as span:
            parents.append(span.get_span_context())
            headers = [dict(tracing._context_to_headers({})) for _ in range(3)]  # three activities, separately encoded
        contexts = [tracing._context_from_headers(h) for h in headers]
        assert all(c is contexts[0] for c in contexts)
        assert trace.get_current_span(contexts[0]).get_span_context().span_id == parents[-1].span_id
    assert len(extracted) == 2, extracted
    assert tracing._context_from_headers({}) is None
