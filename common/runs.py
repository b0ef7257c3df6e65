"""Whose run is this: a running run under one of Bifrost's ids, judged only by what the server sets about it.

Anyone with namespace access may start any workflow type under any id on any task queue; a run of another type,
or on a task queue no Bifrost worker polls, was not started by Bifrost and will never run Bifrost's code there."""

from __future__ import annotations


def foreign_run(workflow_type: str, task_queue: str, *, want_type: str | None, want_queue: str | None) -> str | None:
    """Why a run of `workflow_type` on `task_queue` is not the Bifrost run wanted, or None when it is (a `want_…`
    of None is not checked). Both facts come from the server (describe()), never from search attributes or memo."""
    if want_type is not None and workflow_type != want_type:
        return f"runs workflow type {workflow_type!r}, not {want_type!r}"
    if want_queue is not None and task_queue != want_queue:
        return f"runs on task queue {task_queue!r}, not {want_queue!r}"
    return None
