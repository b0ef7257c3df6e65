"""Tracing: one rollout is one trace, from the client that starts it through its stages' workflows and activities."""

from __future__ import annotations

from collections import Counter

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from worker.converter import DATA_CONVERTER
from worker.telemetry import tracing_interceptor


async def test_a_rollout_is_one_trace_across_client_workflows_and_activities(env, task_queue, tmp_path) -> None:
    exporter = InMemorySpanExporter()
    client = await Client.connect(env.client.service_client.config.target_host, namespace=env.client.namespace,
                                  data_converter=DATA_CONVERTER, interceptors=[tracing_interceptor(None, exporter=exporter)])
    req = make_request()
    async with running_worker(client, fleet(), task_queue, tmp_path):
        handle = await start(client, req, task_queue)
        result = await outcome(handle)
    assert result.status == "succeeded"
    spans = exporter.get_finished_spans()
    root = [s for s in spans if s.name == "StartWorkflow:RolloutWorkflow" and s.attributes
            and s.attributes.get("temporalWorkflowID") == handle.id]
    assert len(root) == 1, [s.name for s in spans]
    trace_id = root[0].context.trace_id
    names = Counter(s.name for s in spans if s.context.trace_id == trace_id)
    stages = len(result.stages)
    assert names["RunWorkflow:RolloutWorkflow"] >= 1
    # each stage starts through Nexus in the machinery namespace, its trace context in the operation's headers
    for span_name in ("StartNexusOperation:BifrostMachinery/run_stage", "RunStartNexusOperationHandler:BifrostMachinery/run_stage",
                      "StartWorkflow:StageWorkflow"):
        assert names[span_name] == stages, (span_name, names)
    assert names["RunWorkflow:StageWorkflow"] >= stages, names
    for activity in ("deploy_canary", "deploy_baseline", "analyze_canary", "promote"):
        assert names[f"RunActivity:{activity}"] == stages, (activity, names)
    assert names["RunActivity:request_service_lock"] >= 1, names  # the lock, through an activity's own client call
    assert names["RunActivity:query_workflow"] >= stages, names  # the peer queries that confirm internal signals...
    assert not [n for n in names if n.startswith(("QueryWorkflow:", "HandleQuery:"))], names  # ...are not traced
    others = {s.context.trace_id for s in spans if s.attributes and s.attributes.get("temporalWorkflowID", "").startswith(handle.id)}
    assert others == {trace_id}, "a span of this rollout landed in another trace"
    # no span for scheduling an activity nor for the signals between Bifrost's own workflows (they cost a host call
    # each, docs/benchmarks.md telemetry cost): a stage's activities hang under the span that started the stage
    assert not [n for n in names if n.startswith(("StartActivity:", "SignalExternalWorkflow:", "HandleSignal:"))], names
    by_id = {s.context.span_id: s for s in spans}
    for span in spans:
        if span.name == "RunActivity:deploy_canary":
            assert span.parent is not None and by_id[span.parent.span_id].name == "StartWorkflow:StageWorkflow"


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
    stages = [e.nexus_operation_scheduled_event_attributes for e in events  # started through Nexus
              if e.event_type == EventType.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED]
    assert scheduled and stages
    assert not any("_tracer-data" in a.header.fields for a in scheduled)
    assert not any(key.lower() in ("traceparent", "_tracer-data") for a in stages for key in a.nexus_header)
    started = events[0].workflow_execution_started_event_attributes
    assert "_tracer-data" not in started.header.fields
