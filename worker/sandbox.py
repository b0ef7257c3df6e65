"""The workflow sandbox Bifrost's workers run in: the SDK's own, minus two costs it pays on the host for nothing.

Profiled in docs/benchmarks.md ("Where a workflow task's CPU went"): with the stock sandbox a worker spent about
a sixth of its CPU outside workflow code, in two places this module removes without touching what the sandbox
protects (every workflow run still imports its workflow module afresh, under the same restrictions):

- **Payload contexts.** For every payload sequence of every activation and completion (three visitor passes
  each way), the SDK asks the workflow for the payload's serialization context by compiling a two-line
  snippet and running it with the sandbox's importer applied (sys.modules and builtins swapped in and out).
  The answer is computed by the SDK's own instance code (which is passed through, not sandboxed) from its
  pending-command tables; `_Instance` here calls that same method directly.
- **Compiling the workflow modules.** Each new workflow run (a start, a cache miss, a query of a closed
  workflow) re-imports its workflow module. Without bytecode on disk (an editable install, or
  PYTHONDONTWRITEBYTECODE=1 as in this project's image and dev machines), every such import compiled the
  module's source again; `CompileOnce` compiles each source text once per process and hands the sandbox the
  same immutable code object, which it still executes in a fresh module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import CodeType, ModuleType
from typing import Any

from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowRunner
from temporalio.worker._workflow_instance import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance as _SdkInstance

from worker.bounds import bound_and_log

WORKFLOW_PACKAGES = ("workflows",)  # the packages whose modules each workflow run re-imports in its sandbox


class _Instance(_SdkInstance):
    """The SDK's sandboxed instance; payload contexts are read from the instance without re-entering the sandbox,
    and updates, signals and start inputs over the bound on sent payloads never reach the workflow (worker/bounds.py)."""

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        bound_and_log(act, self.instance_details.info.workflow_id)
        return super().activate(act)

    def _inner(self) -> Any:
        return self.globals_and_locals.get("__temporal_in_sandbox")

    def get_serialization_context(self, command_info: Any) -> Any:
        inner = self._inner()
        if inner is None:  # the instance failed to start: let the SDK's path report it
            return super().get_serialization_context(command_info)
        return inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        inner = self._inner()
        if inner is None:
            return super().get_external_store_context(command_info)
        return inner.get_external_store_context(command_info)


class BifrostSandboxRunner(SandboxedWorkflowRunner):
    """`SandboxedWorkflowRunner` with the default restrictions; its instances are `_Instance` above."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Instance(det, self.runner_class, self.restrictions)


class _CachedSourceLoader(importlib.machinery.SourceFileLoader):
    """A source loader that makes one code object per source text per process (code objects are immutable).

    Keyed by the source itself, so an edited file is compiled afresh; whether the code would come from source
    or from a `.pyc` (unmarshalled anew on every import), every run after the first reuses the same object.
    """

    _code: dict[tuple[str, bytes], CodeType] = {}
    _lock = threading.Lock()

    def get_code(self, fullname: str) -> CodeType | None:
        path = self.get_filename(fullname)
        key = (str(path), bytes(self.get_data(path)))
        code = self._code.get(key)
        if code is None:
            code = super().get_code(fullname)
            if code is None:
                return None
            with self._lock:
                self._code[key] = code
        return code


class CompileOnce(importlib.abc.MetaPathFinder):
    """Finds Bifrost's workflow modules as the path finder does, loading them with `_CachedSourceLoader`."""

    def __init__(self, packages: Sequence[str] = WORKFLOW_PACKAGES) -> None:
        self.packages = tuple(packages)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == p or fullname.startswith(p + ".") for p in self.packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        spec.loader = _CachedSourceLoader(spec.loader.name, spec.loader.path)
        return spec


def install_compile_once() -> None:
    """Put `CompileOnce` first on sys.meta_path, once per process."""
    if not any(isinstance(f, CompileOnce) for f in sys.meta_path):
        sys.meta_path.insert(0, CompileOnce())


def workflow_runner() -> WorkflowRunner:
    """The runner every Bifrost worker uses: the SDK's sandbox and default restrictions, without the costs above."""
    install_compile_once()
    return BifrostSandboxRunner(restrictions=SandboxRestrictions.default)
