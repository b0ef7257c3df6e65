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
    assert names["StartChildWorkflow:StageWorkflow"] == stages, names
    assert names["RunWorkflow:StageWorkflow"] >= stages, names
    for activity in ("deploy_canary", "deploy_baseline", "analyze_canary", "promote"):
        assert names[f"RunActivity:{activity}"] == stages, (activity, names)
    assert names["RunActivity:request_service_lock"] >= 1, names  # the lock, through an activity's own client call
    others = {s.context.trace_id for s in spans if s.attributes and s.attributes.get("temporalWorkflowID", "").startswith(handle.id)}
    assert others == {trace_id}, "a span of this rollout landed in another trace"
