"""The audit trail: who did what to a workflow, when (workflow time), on what and why."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio import workflow


class AuditEntry(BaseModel):
    """One action on a workflow: who, what, when (workflow time), on what and why."""

    at: datetime
    who: str
    action: str
    target: str | None = None
    detail: str = ""


def audit_entry(who: str, action: str, target: str | None = None, detail: str = "") -> AuditEntry:
    """One audit line, at workflow time (for a workflow without Controls, e.g. a stage's ignored signals)."""
    return AuditEntry(at=workflow.now(), who=who, action=action, target=target, detail=detail)
