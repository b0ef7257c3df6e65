"""Replay recorded histories against today's workflow code: a non-deterministic change fails here."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from worker.build import WORKFLOWS
from worker.converter import DATA_CONVERTER
from worker.sandbox import workflow_runner

HISTORIES = sorted((Path(__file__).resolve().parent.parent / "histories").glob("*.json"))


def test_histories_are_recorded():
    names = {p.name.rsplit("-", 1)[0] for p in HISTORIES}
    assert {"good", "regression", "report", "approval-pause", "abort", "soak-continued", "evacuation-approved",
            "evacuation-restore", "evacuation-alarm", "signals-queue", "signals-regression", "signals-skip-soak"} <= names
    assert len([p for p in HISTORIES if p.name.startswith("soak-continued-")]) >= 2  # a chain that crossed continue-as-new
    assert len([p for p in HISTORIES if p.name.startswith("guard-")]) >= 2  # a region guard across continue-as-new
    # the confirmed internal signals (record_signal_histories.py): each patch and its confirming query are in them
    signals = "".join(p.read_text() for p in HISTORIES if p.name.startswith("signals-"))
    patches = {base64.b64decode(m).decode() for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', signals)}
    assert any("lock-signals-confirmed" in m for m in patches) and any("stage-signals-confirmed" in m for m in patches)
    assert '"query_workflow"' in signals
    # a rollout that re-checked the lock while it waited (record_lockwait_histories.py)
    lockwait = "".join(p.read_text() for p in HISTORIES if p.name.startswith("lockwait-"))
    markers = {base64.b64decode(m).decode() for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', lockwait)}
    assert any("lock-wait-rechecks" in m for m in markers) and '"timerStartedEventAttributes"' in lockwait
    # the notices and a reset while holding the lock (record_notify_histories.py): each patch is in them
    notify = "".join(p.read_text() for p in HISTORIES if p.name.startswith(("notify-", "reset-holding-", "resubmit-")))
    markers = {base64.b64decode(m).decode(errors="ignore") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', notify)}
    for patch in ("notify-approval-pending", "notify-window-closed", "notify-paused", "notify-queued", "notify-traffic-moves",
                  "lock-regrant-to-waiting-holder", "stage-start-waits-for-previous-run", "gates-skip-waves-already-done"):
        assert any(patch in m for m in markers), patch
    # the shared controls' shapes (record_controls_histories.py): phase + typed holds, upserts only on change
    controls = "".join(p.read_text() for p in HISTORIES if p.name.startswith("controls-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', controls)}
    assert any("controls-upsert-on-change" in m for m in marked)
    assert {"controls-rollout", "controls-evacuation"} <= names
    # reverts (record_revert_histories.py): one that evacuated and restored a production region, one refused by the lock,
    # one queued behind a running rollout (patch revert-queued-notice: it told people whom it waits for), one aborted
    # while queued that asked for its own cancellation and ended Canceled (patch aborted-revert-ends-canceled)
    assert {"revert-reverted", "revert-evacuation", "revert-refused", "revert-aborted", "revert-queued"} <= names
    aborted = "".join(p.read_text() for p in HISTORIES if p.name.startswith("revert-aborted-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', aborted)}
    assert any("aborted-revert-ends-canceled" in m for m in marked)
    assert '"cancel_run"' in aborted and '"EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"' in aborted
    # an evacuation and a revert stopped by Request Cancellation, naming who sent it (record_cancel_named_histories.py)
    assert {"cancel-named-evacuation", "cancel-named-revert"} <= names
    named = "".join(p.read_text() for p in HISTORIES if p.name.startswith("cancel-named-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', named)}
    assert any("cancel-names-requester-everywhere" in m for m in marked)
    assert named.count('"cancel_request"') >= 2 and named.count('"EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"') == 2
    # pre-warm raising HPA floors and putting them back (record_evacuation_histories.py hpa): the patch is in them
    hpa = "".join(p.read_text() for p in HISTORIES if p.name.startswith("evacuation-hpa-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', hpa)}
    assert any("prewarm-hpa-floor" in m for m in marked)
    assert {"evacuation-hpa-evacuate", "evacuation-hpa-restore", "evacuation-hpa-abort"} <= names
    # an evacuation whose health looks had ReportWorkflows draw their reports (record_evacuation_histories.py reports)
    assert "evacuation-reports" in names
    # holds on failure (record_hold_histories.py): retried, promoted (a sibling told to hold), timed out
    held = "".join(p.read_text() for p in HISTORIES if p.name.startswith("hold-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', held)}
    for patch in ("stage-hold-on-failure", "rollout-hold-on-failure", "notify-held"):
        assert any(patch in m for m in marked), patch
    assert '"signalName": "resolve"' in held and '"signalName": "set_hold"' in held
    assert {"hold-retry", "hold-promote", "hold-timeout", "hold-evacuate", "hold-evacuate-traffic"} <= names
    assert '"EvacuationWorkflow"' in held  # evacuate_and_hold: the held stage's evacuation and restore
    # rollouts that know the traffic (record_traffic_histories.py): a wave held for traffic, a window judged again
    traffic = "".join(p.read_text() for p in HISTORIES if p.name.startswith(("traffic-hold-", "traffic-rejudge-")))
    marks = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', traffic)}
    assert any("rollout-holds-for-traffic" in m for m in marks) and any("stage-rejudges-after-traffic-moves" in m for m in marks)
    assert '"region_weights"' in traffic
    # the console round 2 (record_console_histories.py): each patch is in them, and the cancel_request read
    console = "".join(p.read_text() for p in HISTORIES if p.name.startswith("console-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', console)}
    for patch in ("search-furthest-environment", "cancel-names-requester", "ordered-rollback-completes",
                  "evacuation-aborted-fails"):
        assert any(patch in m for m in marked), patch
    assert '"cancel_request"' in console
    # aborted rollouts that end Canceled (record_canceled_histories.py): one asked for its own cancellation
    canceled = "".join(p.read_text() for p in HISTORIES if p.name.startswith("canceled-"))
    marked = {base64.b64decode(m).decode(errors="replace") for m in re.findall(r'"data": "([A-Za-z0-9+/=]+)"', canceled)}
    assert any("aborted-ends-canceled" in m for m in marked)
    assert '"cancel_run"' in canceled and '"EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"' in canceled
    assert {"canceled-abort", "canceled-request", "canceled-evacuation"} <= names
    # stages begun before reports moved to ReportWorkflow (they draw in an activity): kept, never re-recorded
    assert any('"render_report"' in p.read_text() for p in HISTORIES if p.name.startswith("pre-report-workflow-"))


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    data = json.loads(path.read_text())
    history = WorkflowHistory.from_json(data["workflow_id"], data["history"])
    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)
