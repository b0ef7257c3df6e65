"""A run that a Reset started: one audit line that says so, instead of one line per signal the reset re-applied.

The server replays the old run's history up to the reset point in a new run and re-applies the signals the old run
received after it; the new run ignores them (they answer questions it has not asked). The new run knows it is a
reset by its own info: its first execution is another run (a rollout never continues as new). Who asked and why are
in its history's reset event (WorkflowTaskFailed, cause ResetWorkflow), which `bifrost status` reads; the workflow
cannot read its history without a command the old run never issued, which would break the replay."""

from __future__ import annotations

from temporalio import workflow

from workflows.controls.audit import AuditEntry, audit_entry


def reset_from() -> str | None:
    """The run this one was reset from (its chain's first run), or None when this run is not a reset."""
    if not workflow.in_workflow():  # a state handled outside a run (tests, the CLI)
        return None
    info = workflow.info()
    if info.continued_run_id is not None or info.first_execution_run_id == info.run_id:
        return None
    return info.first_execution_run_id


class ResetFold:
    """Folds the signals a reset re-applied (ignored before the run's own first line) into one `reset` line."""

    def __init__(self) -> None:
        self.entry: AuditEntry | None = None
        self.ignored: dict[str, int] = {}
        self.folding = True

    def take(self, audit: list[AuditEntry], action: str) -> AuditEntry | None:
        """The reset line when `action` is folded into it (an ignored signal before the run's own first line)."""
        if not self.folding:
            return None
        base = reset_from()
        if base is None or not action.startswith("ignored "):
            self.folding = False
            return None
        if self.entry is None:
            self.entry = audit_entry("bifrost", "reset", None, "")
            audit.append(self.entry)
        signal = action.removeprefix("ignored ")
        self.ignored[signal] = self.ignored.get(signal, 0) + 1
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.ignored.items()))
        self.entry.detail = (f"a new run after a Reset of run {base}; who and why: the reset event of this run's history "
                             f"(`bifrost status`); the signals the reset re-applied were ignored ({counts})")
        return self.entry
