"""The worker's sandbox runner: the SDK's sandbox and restrictions, without its two host-side costs (worker/sandbox.py)."""

from __future__ import annotations

from typing import Any

import temporalio.workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.worker._workflow_instance import WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _fake_info

from worker.sandbox import BifrostSandboxRunner, workflow_runner
from workflows.stage.workflow import StageWorkflow


def _instance(runner: SandboxedWorkflowRunner, cls: type = StageWorkflow) -> Any:
    """A sandboxed instance of `cls`, as the worker creates one for a new workflow run."""
    return runner.create_instance(WorkflowInstanceDetails(
        payload_converter_factory=DataConverter.default._new_payload_converter,
        failure_converter_class=DataConverter.default.failure_converter_class,
        interceptor_classes=[], defn=temporalio.workflow._Definition.must_from_class(cls), info=_fake_info,
        randomness_seed=-1, extern_functions={}, disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[], patch_activation_callback=None,
        last_completion_result=Payloads(), last_failure=Failure(),
    ))


def test_the_runner_is_the_sdk_sandbox_with_its_default_restrictions():
    runner = workflow_runner()
    assert isinstance(runner, SandboxedWorkflowRunner) and isinstance(runner, BifrostSandboxRunner)
    assert runner.restrictions is SandboxRestrictions.default


async def test_each_run_still_imports_its_workflow_module_afresh_but_compiles_it_once():
    runner = workflow_runner()
    first, second = _instance(runner), _instance(runner)
    a, b = (i.globals_and_locals["__temporal_workflow_class"] for i in (first, second))
    assert a is not b and a is not StageWorkflow  # a fresh module per run: the sandbox's isolation is intact
    assert a.run.__code__ is b.run.__code__  # ...executing one code object, compiled once


async def test_payload_contexts_are_read_without_re_entering_the_sandbox(monkeypatch: Any):
    instance = _instance(workflow_runner())
    entered: list[str] = []
    monkeypatch.setattr(instance, "_run_code", lambda code, **kw: entered.append(code))
    context = instance.get_serialization_context(None)
    assert context == WorkflowSerializationContext(namespace=_fake_info.namespace, workflow_id=_fake_info.workflow_id)
    assert instance.get_external_store_context(None) is not None
    assert entered == []


async def test_the_contexts_match_the_stock_sandboxs():
    ours, stock = _instance(workflow_runner()), _instance(SandboxedWorkflowRunner())
    assert ours.get_serialization_context(None) == stock.get_serialization_context(None)
    assert ours.get_external_store_context(None) == stock.get_external_store_context(None)

