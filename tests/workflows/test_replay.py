"""Replay recorded histories against today's workflow code: a non-deterministic change fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from worker.build import WORKFLOWS
from worker.converter import DATA_CONVERTER

HISTORIES = sorted((Path(__file__).resolve().parent.parent / "histories").glob("*.json"))


def test_histories_are_recorded():
    names = {p.name.rsplit("-", 1)[0] for p in HISTORIES}
    assert {"good", "regression", "report", "approval-pause", "abort", "soak-continued", "evacuation-approved",
            "evacuation-restore", "evacuation-alarm"} <= names
    assert len([p for p in HISTORIES if p.name.startswith("soak-continued-")]) >= 2  # a chain that crossed continue-as-new
    # stages begun before reports moved to ReportWorkflow (they draw in an activity): kept, never re-recorded
    assert any('"render_report"' in p.read_text() for p in HISTORIES if p.name.startswith("pre-report-workflow-"))


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER)
    await replayer.replay_workflow(history)
