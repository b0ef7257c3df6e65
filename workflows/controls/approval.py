"""Who may decide: the one approver check of every update that approves or decides."""

from __future__ import annotations

from collections.abc import Sequence

from common.text import visible
from workflows.controls.payloads import refused


def check_approver(who: str, approvers: Sequence[str], *, field: str, source: str) -> None:
    """The one approver check of every update that approves or decides (gates, soaks, windows, holds, evacuations,
    the guard's proposals): refuse `who` unless on `approvers`. An empty list lets anyone who may send updates
    decide (the request's, the evacuation's and the guard's documented default). The refusal names the field, the
    name (escaped: one line, no control characters) and where the list is set, but not the names on it: whoever
    may send an update should not learn from a refusal whose name would pass."""
    if not approvers or who in approvers:
        return
    raise refused(f"{field}: {visible(who)!r} may not approve or decide here: the name is not on the list of "
                  f"approvers ({source})")
