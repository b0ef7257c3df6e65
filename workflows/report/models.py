"""What a report run returns."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReportOutcome(BaseModel):
    """What a ReportWorkflow did: the page's URL, or why it could not draw one."""

    url: str | None
    size_bytes: int | None = None
    error: str | None = Field(default=None, description="why there is no report (the verdict never depends on one)")
