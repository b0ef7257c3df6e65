"""Replay recorded histories against today's workflow code: a non-deterministic change fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from worker.build import WORKFLOWS
from worker.converter import DATA_CONVERTER
from worker.sandbox import workflow_runner

HISTORIES = sorted((Path(__file__).resolve().parent.parent / "histories").glob("*.json"))


def _text(*prefixes: str) -> str:
    return "".join(p.read_text() for p in HISTORIES if p.name.rsplit("-", 1)[0] in prefixes)


def test_histories_are_recorded():
    """Every group tests/workflows/record_histories.py writes is here, with the shapes that make it worth replaying."""
    from tests.workflows.record_histories import GROUPS

    names = {p.name.rsplit("-", 1)[0] for p in HISTORIES}
    expected = {prefix for group in GROUPS.values() for prefix in group.prefixes}
    assert expected <= names, sorted(expected - names)
    assert len([p for p in HISTORIES if p.name.startswith("soak-continued-")]) >= 2  # a chain that crossed continue-as-new
    assert len([p for p in HISTORIES if p.name.startswith("guard-")]) >= 2  # a region guard across continue-as-new
    # the 0.x baseline has no patches: a change of commands is a new build (docs/versioning.md), not a marker
    assert not any('"core_patch"' in p.read_text() for p in HISTORIES)
    signals = _text("signals-queue", "signals-regression", "signals-skip-soak")
    assert '"query_workflow"' in signals  # the lock and stages confirm internal signals with the sender's own state
    lockwait = _text("lockwait-regrant")
    assert '"timerStartedEventAttributes"' in lockwait and '"query_workflow"' in lockwait  # re-checked the lock
    held = _text("hold-retry", "hold-promote", "hold-timeout", "hold-evacuate")
    assert '"signalName": "resolve"' in held and '"signalName": "set_hold"' in held
    assert '"EvacuationWorkflow"' in held  # evacuate_and_hold: the held stage's evacuation and restore
    assert '"region_weights"' in _text("traffic-hold", "traffic-rejudge")
    canceled = _text("canceled-abort", "canceled-request", "canceled-evacuation", "console-cancel", "cancel-named-revert",
                     "cancel-named-evacuation", "revert-aborted")
    assert '"cancel_run"' in canceled and '"cancel_request"' in canceled
    assert canceled.count('"EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"') >= 5
    assert '"ReportWorkflow"' in _text("evacuation-reports") and '"notify"' in _text("notify-holds", "notify-traffic")


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, workflow_runner=workflow_runner(),
                        namespace="default")  # as recorded: a rollout names its stages' endpoint from its namespace
    await replayer.replay_workflow(history)
