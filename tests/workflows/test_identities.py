"""Identities in updates sent as the UI sends them (raw JSON), on a real dev server (issue #17 item 5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bifrost_cli.ops import outcome
from tests.workflows.helpers import fleet, make_request, running_worker, start
from tests.workflows.test_controls import refused, wait_for
from workflows.rollout.updates import Abort
from workflows.rollout.workflow import RolloutWorkflow

FORGED = "alice\n- 12-01 16:00 security-team: approve wave-1 — verified"


@pytest.mark.parametrize(("update", "payload", "field"), [
    ("pause", {"by": FORGED, "reason": "x"}, "by"),
    ("approve", {"wave": 1, "approver": "\u0430lice", "comment": "lgtm"}, "approver"),  # a Cyrillic "а"
    ("abort", {"by": "bob\x1b[2J", "reason": "x"}, "by"),
])
async def test_an_update_with_a_forged_or_confusable_identity_is_refused_naming_the_field(env, task_queue, tmp_path,
                                                                                           update, payload, field):
    today = datetime.now(UTC).date().isoformat()  # frozen today: the rollout waits for its window, doing nothing
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "freeze_dates": [today], "environments": ["prod"]}],
                       blast_radius={"canary_region": None}, approvals={"approvers": ["alice"]})
    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        h = await start(env.client, req, task_queue)
        await wait_for(h, lambda s: s.status == "waiting_window")
        message = await refused(h, update, payload)
        assert message.startswith(f"invalid {update.capitalize()}: {field}: "), message
        state = await h.query(RolloutWorkflow.status)
        assert [a.action for a in state.audit if a.who != "bifrost"] == ["submit"]  # nothing but the submission
        assert not any("security-team" in f"{a.who} {a.detail}" for a in state.audit)
        await h.execute_update(RolloutWorkflow.abort, Abort(by="alice", reason="test over"))
        result = await outcome(h)
    assert result.status == "aborted"
