"""The lock's models. They live in common/lock.py, since the activity that reaches the lock (signal-with-start,
activities/lock.py) reads them too and may not import a workflow; here is what the lock does with its record."""

from __future__ import annotations

from common.lock import DROPPED_KEPT


def remember(record: dict[str, str], workflow_id: str, what: str) -> None:
    """Note a refusal or supersession; only the latest DROPPED_KEPT are kept (the lock lives on through continue-as-new)."""
    record[workflow_id] = what
    while len(record) > DROPPED_KEPT:
        del record[next(iter(record))]
