"""Holds that promote a failed canary when nobody decides in time: which regions, the platform's floor, the warning."""

from __future__ import annotations

from workflows.request.model import RolloutRequest
from workflows.request.regions import HOLDS


def promoting_holds(req: RolloutRequest) -> list[str]:
    """The regions whose failed stages hold and are promoted if the hold times out (hold.on_timeout: promote)."""
    if req.hold.on_timeout != "promote":
        return []
    return [r.name for r in req.regions if r.on_failure in HOLDS]


def duration(minutes: float) -> str:
    """A duration given in minutes, as people read it: 1 s, 90 s, 45 min, 2 h."""
    if minutes < 2:
        return f"{minutes * 60:.4g} s"
    if minutes < 120:
        return f"{minutes:.4g} min"
    return f"{minutes / 60:.4g} h"


def promote_hold_floor_problem(req: RolloutRequest, floor_minutes: float) -> str | None:
    """Why the request's holds may not promote on timeout this soon (None: they may). `floor_minutes` is the
    platform's (the worker's targets file, policy.min_promote_hold_minutes), never the request's."""
    regions = promoting_holds(req)
    if not regions or req.hold.timeout_minutes >= floor_minutes:
        return None
    return (f"hold.timeout_minutes: {req.hold.timeout_minutes:g} ({duration(req.hold.timeout_minutes)}) is shorter than "
            f"the platform's floor of {floor_minutes:g} ({duration(floor_minutes)}) for hold.on_timeout: promote, which "
            f"would promote a failed canary of {', '.join(regions)} when nobody decides in time; give at least "
            f"{floor_minutes:g}, or on_timeout: rollback (policy.min_promote_hold_minutes in the targets file sets the floor)")


def promote_on_timeout_warning(req: RolloutRequest) -> str | None:
    """The loud line `bifrost plan` and `submit` print when a hold promotes on timeout (None: none does)."""
    regions = promoting_holds(req)
    if not regions:
        return None
    return (f"WARNING: hold.on_timeout is promote: a FAILED canary of {', '.join(regions)} that holds is PROMOTED if "
            f"nobody decides within {duration(req.hold.timeout_minutes)} (hold.timeout_minutes)")
