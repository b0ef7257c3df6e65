"""Bounded payloads: an update, signal or workflow start input over `MAX_SENT_PAYLOAD_BYTES` never reaches workflow code.

Why at the activation, not in a validator or the converter: the SDK's core answers every update, accepted or
rejected, with a message that carries the whole request back to the server. An update over the server's blob
limit (2 MiB by default, `limit.blobSize.error`) so made the completion of the workflow task too large: the
task failed (PayloadsTooLarge) and was retried until the caller gave up (20 s), and no other update could land
meanwhile. Whatever refuses such an update must therefore not answer it. So the worker removes it from the
activation before the workflow sees it; the task completes without an answer and the server rejects the update
itself ("not processed by the worker"), writing nothing to history.

- **Updates** over the bound are removed: the server rejects them; nothing is written to history.
- **Signals** over the bound are removed: ignored (the server has already written the signal to history; a
  signal over the server's own blob limit is refused by the server when sent).
- **A start input** over the bound (a UI start, a script) is replaced by a marker the data converter refuses
  (worker/converter.py): the run fails at once with one `InvalidPayload` line naming the size, no stack trace.
  Not bounded: a child's input and a workflow's own continue-as-new (server-set facts: the run's parent, its
  continue-as-new initiator), which Bifrost's code built from state it had already checked; a lock or guard that
  has run for weeks may carry more than the bound into its next run.

Deterministic: the same history gives the same activations, so a replay drops and marks exactly what the first
run did. Bifrost's own signals and updates are far below the bound (under 1 KB; tests/hostile/test_payload_bounds.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import ContinueAsNewInitiator
from temporalio.bridge.proto.workflow_activation import InitializeWorkflow, WorkflowActivation

from common.types import MAX_SENT_PAYLOAD_BYTES

log = logging.getLogger(__name__)

# The encoding of the marker that stands in for a start input over the bound; its data is the input's size in bytes.
OVERSIZED_ENCODING = b"bifrost/oversized"


def payload_bytes(payloads: Iterable[Payload]) -> int:
    """The size of `payloads` as sent (data and metadata), the figure the bound is about."""
    return sum(p.ByteSize() for p in payloads)


def too_large_text(size: int) -> str:
    """One line naming the size and the bound."""
    return f"the input is {size:,} bytes, over the {MAX_SENT_PAYLOAD_BYTES:,}-byte bound on anything sent to Bifrost"


def sent_from_outside(init: InitializeWorkflow) -> bool:
    """Whether a start input may come from a person or a script: not a child's, nor the workflow's own continue-as-new
    (a retry or a cron run repeats an input someone sent, so it counts as sent)."""
    own_continuation = (init.continued_from_execution_run_id != ""
                        and init.continued_initiator == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_WORKFLOW)
    return not init.HasField("parent_workflow_info") and not own_continuation


def bound_activation(act: WorkflowActivation) -> list[str]:
    """Drop updates and signals over the bound from `act` and mark a start input over it; one line per thing done."""
    done: list[str] = []
    keep = []
    for job in act.jobs:
        if job.HasField("do_update") and (size := payload_bytes(job.do_update.input)) > MAX_SENT_PAYLOAD_BYTES:
            done.append(f"dropped update {job.do_update.name!r} (id {job.do_update.id}): {too_large_text(size)}; "
                        "the server rejects it")
            continue
        if job.HasField("signal_workflow") and (size := payload_bytes(job.signal_workflow.input)) > MAX_SENT_PAYLOAD_BYTES:
            done.append(f"ignored signal {job.signal_workflow.signal_name!r}: {too_large_text(size)}")
            continue
        if job.HasField("initialize_workflow") and sent_from_outside(job.initialize_workflow):
            args = job.initialize_workflow.arguments
            if (size := payload_bytes(args)) > MAX_SENT_PAYLOAD_BYTES:
                marker = Payload(metadata={"encoding": OVERSIZED_ENCODING}, data=str(size).encode())
                del args[:]
                args.append(marker)
                done.append(f"refused the start input of {job.initialize_workflow.workflow_type}: {too_large_text(size)}")
        keep.append(job)
    if len(keep) != len(act.jobs):
        del act.jobs[:]
        act.jobs.extend(keep)
    return done


def bound_and_log(act: WorkflowActivation, workflow_id: str) -> None:
    """`bound_activation`, with one warning line per thing done (not again on replay)."""
    for line in bound_activation(act):
        if not act.is_replaying:
            log.warning("%s: %s", workflow_id, line)
