"""The final state of a run that ended Canceled, read from the run's own history: the one reader of OUTCOME_MEMO.

An aborted rollout, revert or hand-started evacuation ends Canceled, which carries no result and no failure details, so
the workflow writes its final state to the memo (workflows/controls/ending.py) right before it ends. The memo Temporal shows
(`describe().memo`, a list's rows) also holds whatever memo the run was *started* with, and anyone may start any
workflow type with anything: a run that ends Canceled without writing its own (canceled before the code that writes
it, an old worker's run, another workflow type) would show its starter's words as its final state. So the state is
taken only from the run's own upsert (a WorkflowPropertiesModified event) before its Canceled event, never from the
start event. Pure: it reads history events (the protobuf messages Temporal's client returns) by field name, so the CLI
(bifrost_cli/canceled.py) and the revert's release reader (activities/releases.py) share it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from common.failures import OUTCOME_MEMO

_UPSERT = "workflow_properties_modified_event_attributes"
_CANCELED = "workflow_execution_canceled_event_attributes"


def payload_json(payloads: Iterable[Any]) -> Any:
    """The first payload as plain JSON (Bifrost's payloads are JSON), or None."""
    for p in payloads:
        try:
            return json.loads(p.data)
        except ValueError:
            return None
    return None


def own_canceled_state(events: Iterable[Any]) -> Any:
    """The final state (plain JSON) a run that ended Canceled wrote to its memo itself: the last OUTCOME_MEMO its own
    upserts set before its Canceled event. None if the history does not end Canceled or the run wrote none (a memo
    given at start is in the start event, and is never read)."""
    memo: Any = None
    for event in events:
        kind = event.WhichOneof("attributes")
        if kind == _UPSERT:
            fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
            if OUTCOME_MEMO in fields:
                memo = payload_json([fields[OUTCOME_MEMO]])
        elif kind == _CANCELED:
            return memo
    return None
