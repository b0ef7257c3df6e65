"""Who may run a lock, a stage or a report: each checks, before it does anything, that the facts the server set
about its own run (its id, its parent, whether it continued itself as new) fit what it was given.

Anyone who may act on the namespace can start any workflow type under any id with any input (docs/security.md),
so a lock started by hand with a holder in its input, a stage started by hand (a deploy no rollout judges), or a
report started by hand (a page written over a real one) would otherwise run as if Bifrost had started them. The
server sets `parent` (only a parent workflow's start-child command does) and `continued_run_id` (a client's start
request has no such field), so neither can be forged by a start. Cron and retry runs also carry a
`continued_run_id`, with their first input again; they are not the workflow's own continue-as-new.

Each function returns None when the run may go on, else the one line it fails with (InvalidPayload, naming the field).
"""

from __future__ import annotations

from temporalio import workflow

from common.lock import LockState, lock_id, own_fields_given
from common.types import stage_key
from workflows.provenance import is_own_id, own_continue_as_new

ROLLOUT_PREFIX = "rollout"  # a rollout's id is `rollout/<service>/<version>` (RolloutRequest.workflow_id), maybe `/<suffix>`
REPORT_SEP = "/report/"  # a report's id is `<its parent's id>/report/<analysis id>` (workflows/report.report_workflow_id)


def lock_refusal(state: LockState, info: workflow.Info) -> str | None:
    """A lock runs only as `service-lock/<its service>`, and starts empty unless it continued itself as new: its holder,
    queue, refusals, supersessions and log are built only from requests it confirmed."""
    if info.workflow_id != lock_id(state.service):
        return (f"invalid LockState: service: the lock of {state.service} runs as {lock_id(state.service)}, "
                f"not as {info.workflow_id}")
    given = own_fields_given(state)
    if given and not own_continue_as_new(info):
        return (f"invalid LockState: {given[0]}: only the lock itself writes its {', '.join(given)} (from the requests it "
                f"confirmed, carried over its own continue-as-new); a lock is started empty")
    return None


def is_rollout_of(rollout_id: str, service: str, version: str) -> bool:
    """`rollout_id` is the id a rollout of `service` `version` runs under: `rollout/<service>/<version>`, or that
    followed by `/<suffix>` (a run started with a suffix, as the tests do)."""
    return is_own_id(rollout_id, f"{ROLLOUT_PREFIX}/{service}/{version}", suffixed=True)


def stage_refusal(rollout_id: str, service: str, version: str, region: str, environment: str,
                  info: workflow.Info) -> str | None:
    """A stage runs only for a rollout of its service and version, under the id that rollout gives it:
    `<rollout id>/<region>/<environment>`. (That the rollout itself started this very run is proven from the
    rollout's own history before the stage deploys anything: workflows/stage/origin.py; a stage has no parent, it
    runs in the machinery namespace, started through Nexus.)"""
    if info.parent is not None:
        return (f"invalid StageInput: rollout_id: a stage is started by its rollout through Nexus, not as the child "
                f"of {info.parent.workflow_id}")
    if not is_rollout_of(rollout_id, service, version):
        return (f"invalid StageInput: rollout_id: {rollout_id} is not a rollout of {service} {version} "
                f"(its id would be {ROLLOUT_PREFIX}/{service}/{version})")
    expected = f"{rollout_id}/{stage_key(region, environment)}"
    if info.workflow_id != expected:
        return f"invalid StageInput: region: the stage of {stage_key(region, environment)} runs as {expected}, not as {info.workflow_id}"
    return None


def report_refusal(rollout_id: str, analysis_id: str, stage: str, info: workflow.Info) -> str | None:
    """A report runs only as the child of the stage or evacuation it draws for, under the id that parent gives it
    (`<parent id>/report/<analysis id>`), and stores its page only under that parent's own key: a stage's rollout
    (the parent is `<rollout_id>/<stage>`) or the evacuation itself (the parent is `rollout_id`)."""
    parent = info.parent
    if parent is None:
        return ("invalid ReportInput: rollout_id: a report is drawn only for the stage or evacuation that starts it; "
                "this one was started by hand (it has no parent), so nothing was written")
    if info.workflow_id != f"{parent.workflow_id}{REPORT_SEP}{analysis_id}":
        return (f"invalid ReportInput: analysis_id: the report of {analysis_id} for {parent.workflow_id} runs as "
                f"{parent.workflow_id}{REPORT_SEP}{analysis_id}, not as {info.workflow_id}")
    if parent.workflow_id not in (rollout_id, f"{rollout_id}/{stage}"):
        return (f"invalid ReportInput: rollout_id: {parent.workflow_id} may store reports only under its own key, "
                f"not under {rollout_id}")
    return None
