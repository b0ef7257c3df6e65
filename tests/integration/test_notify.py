"""Webhook notifications against a local HTTP receiver: delivered as Slack JSON, and never raising on failure."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import SimulatedFleet, VersionEffect
from activities.adapters.targets import TargetsError, parse_targets
from activities.adapters.webhooks import Webhook, WebhookNotifier
from activities.notify import NotifyActivities
from common.types import Notification
from tests.conftest import shared_render_pool
from tests.integration.conftest import Receiver, assert_one_line
from tests.workflows import evacuation_helpers
from tests.workflows.helpers import fleet, make_request, start
from worker.build import build_worker
from worker.converter import DATA_CONVERTER
from workflows.rollout.updates import Approve, OverrideWindow, Pause, Resume
from workflows.rollout.workflow import RolloutWorkflow

pytestmark = pytest.mark.integration

EVENT = Notification(rollout_id="rollout/checkout/1.1.0", service="checkout", version="1.1.0",
                     event="stage_rolled_back", text="canary judged fail: latency_p99 1.9x", stage="us-east-1/prod")


def hook(**kw: object) -> Webhook:
    return Webhook(**{"name": "releases", "url_env": "TEST_WEBHOOK_URL", **kw})  # type: ignore[arg-type]


async def test_posts_slack_compatible_json(webhook_receiver: Receiver, monkeypatch):
    monkeypatch.setenv("TEST_WEBHOOK_URL", f"{webhook_receiver.url}/services/T000/B000/k3y-s3cret")
    assert await WebhookNotifier([hook()]).send(EVENT) is True
    (path, body), = webhook_receiver.posts
    assert path == "/services/T000/B000/k3y-s3cret"
    assert "checkout 1.1.0" in body["text"] and "us-east-1/prod" in body["text"] and "latency_p99" in body["text"]
    assert body["blocks"][0]["type"] == "section" and "rollout/checkout/1.1.0" in body["blocks"][1]["elements"][0]["text"]


async def test_event_filters_choose_the_webhooks(webhook_receiver: Receiver, monkeypatch):
    monkeypatch.setenv("TEST_WEBHOOK_URL", f"{webhook_receiver.url}/a")
    monkeypatch.setenv("TEST_WEBHOOK_URL_2", f"{webhook_receiver.url}/b")
    notifier = WebhookNotifier([hook(events=frozenset({"rollout_completed"})),
                                hook(name="oncall", url_env="TEST_WEBHOOK_URL_2", events=frozenset({"stage_rolled_back"}))])
    assert await notifier.send(EVENT) is True
    assert [p for p, _ in webhook_receiver.posts] == ["/b"]


async def test_failures_return_false_log_without_the_key_and_never_raise(webhook_receiver: Receiver, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="activities.notify")
    secret_url = f"{webhook_receiver.url}/services/T000/B000/k3y-s3cret"
    monkeypatch.setenv("TEST_WEBHOOK_URL", secret_url)
    notifier = WebhookNotifier([hook(max_attempts=2)], backoff_seconds=0.01)

    webhook_receiver.statuses = [503, 503]
    assert await notifier.send(EVENT) is False and len(webhook_receiver.posts) == 2  # 5xx retried once

    webhook_receiver.statuses = [403]
    assert await notifier.send(EVENT) is False and len(webhook_receiver.posts) == 3  # 4xx not retried

    monkeypatch.setenv("TEST_WEBHOOK_URL", "http://127.0.0.1:9/k3y-s3cret")  # nothing listens on port 9
    assert await notifier.send(EVENT) is False

    monkeypatch.delenv("TEST_WEBHOOK_URL")
    assert await notifier.send(EVENT) is False

    text = caplog.text
    assert "could not deliver stage_rolled_back" in text and "POST webhook releases" in text
    assert "TEST_WEBHOOK_URL is not set" in text
    assert "k3y-s3cret" not in text


async def test_a_hanging_webhook_times_out(webhook_receiver: Receiver, monkeypatch):
    monkeypatch.setenv("TEST_WEBHOOK_URL", webhook_receiver.url)
    webhook_receiver.hang = threading.Event()
    assert await WebhookNotifier([hook(timeout_seconds=0.2, max_attempts=1)]).send(EVENT) is False


async def test_the_notify_activity_uses_the_registry_notifier(webhook_receiver: Receiver, monkeypatch):
    monkeypatch.setenv("TEST_WEBHOOK_URL", webhook_receiver.url)
    registry = AdapterRegistry.simulated(SimulatedFleet())
    assert await ActivityEnvironment().run(NotifyActivities(registry).notify, EVENT) is True  # no notifier: logged only
    registry.notifier = WebhookNotifier([hook()], backoff_seconds=0.01)
    assert await ActivityEnvironment().run(NotifyActivities(registry).notify, EVENT) is True
    assert len(webhook_receiver.posts) == 1
    webhook_receiver.statuses = [500, 500]
    assert await ActivityEnvironment().run(NotifyActivities(registry).notify, EVENT) is False


async def test_a_stage_notice_links_its_rollouts_run_in_the_home_namespace(webhook_receiver: Receiver, monkeypatch):
    """A stage runs in the machinery namespace; its notice about the rollout opens the rollout's run's Current
    Details where people act, not the latest run's Event History (what a link without a run id opens)."""
    import dataclasses

    from common import notices

    monkeypatch.setenv("TEST_WEBHOOK_URL", webhook_receiver.url)
    ui = "http://ui.example.test:8233"
    registry = AdapterRegistry.simulated(SimulatedFleet())
    registry.notifier = WebhookNotifier([hook()], backoff_seconds=0.01, ui_url=ui)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="rollout/checkout/1.1.0/us-east-1/prod",
                                   workflow_namespace="default-machinery", workflow_run_id="stage-run")
    step = notices.canary_step(rollout_id="rollout/checkout/1.1.0", service="checkout", version="1.1.0",
                               stage="us-east-1/prod", text="step 1/3", weights={"primary": 90, "canary": 5, "baseline": 5},
                               rollout_run="rollout-run-7")
    assert await env.run(NotifyActivities(registry).notify, step) is True
    [posted] = webhook_receiver.posts
    link = f"{ui}/namespaces/default/workflows/{quote('rollout/checkout/1.1.0', safe='')}/rollout-run-7/user-metadata"
    assert link in json.dumps(posted), posted


async def test_failures_are_logged_as_one_line_with_status_and_fix_but_never_the_url(webhook_receiver: Receiver, monkeypatch,
                                                                                     caplog):
    caplog.set_level(logging.WARNING, logger="activities.adapters.webhooks")
    host = webhook_receiver.url.removeprefix("http://")
    monkeypatch.setenv("TEST_WEBHOOK_URL", f"{webhook_receiver.url}/services/T000/B000/k3y-s3cret?token=t0k3n")
    notifier = WebhookNotifier([hook(max_attempts=2)], backoff_seconds=0.01)
    webhook_receiver.statuses = [403]
    assert await notifier.send(EVENT) is False
    webhook_receiver.statuses = [503, 503]
    assert await notifier.send(EVENT) is False
    forbidden, unavailable = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    start = "could not deliver stage_rolled_back of rollout/checkout/1.1.0: "
    assert_one_line(forbidden, start + "403 Forbidden on POST webhook releases (invalid_token)",
                    "put a fresh webhook URL in TEST_WEBHOOK_URL")
    assert_one_line(unavailable, start + "503 Service Unavailable on POST webhook releases",
                    "the chat service is failing or rate-limiting (2 attempts)")
    for line in (forbidden, unavailable):
        assert "k3y-s3cret" not in line and "t0k3n" not in line and host not in line and "/services/" not in line


# -- telling people when they are needed (#20 item 4), end to end on the dev server -------------------------

UI = "http://temporal.example.test:8233"


def _posts(receiver: Receiver) -> list[dict[str, Any]]:
    return [body for _, body in list(receiver.posts)]


def _with(receiver: Receiver, *words: str) -> list[dict[str, Any]]:
    return [b for b in _posts(receiver) if all(w in b["text"] for w in words)]


async def _reminders_around_approval(h: WorkflowHandle[Any, Any], wave: int) -> tuple[list[int], list[int]]:
    """The numbers of `wave`'s approval reminders the run scheduled before and after it accepted an approve update."""
    before: list[int] = []
    after: list[int] = []
    accepted = False
    async for ev in h.fetch_history_events():
        if ev.HasField("workflow_execution_update_accepted_event_attributes"):
            accepted = accepted or ev.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == "approve"
        elif (ev.HasField("activity_task_scheduled_event_attributes")
              and ev.activity_task_scheduled_event_attributes.activity_type.name == "notify"):
            payloads = ev.activity_task_scheduled_event_attributes.input.payloads
            args = DATA_CONVERTER.payload_converter.from_payloads(list(payloads), [Notification])
            notice = args[0] if args else None
            if isinstance(notice, Notification) and notice.event == "approval_reminder" and notice.wave == wave:
                (after if accepted else before).append(notice.reminder)
    return before, after


async def _until(pred: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    """Poll `pred` until it holds, or fail after `timeout` seconds naming `what`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@asynccontextmanager
async def _notifying_worker(client: Client, receiver: Receiver, task_queue: str, monkeypatch) -> AsyncIterator[SimulatedFleet]:
    monkeypatch.setenv("TEST_WEBHOOK_URL", f"{receiver.url}/services/T000/B000/k3y-s3cret")
    f = fleet()
    registry = AdapterRegistry.simulated(f)
    registry.notifier = WebhookNotifier([hook()], backoff_seconds=0.01, ui_url=UI)
    async with build_worker(client, registry, task_queue=task_queue, reports_dir=Path(".bifrost/test-reports"),
                            render_pool=shared_render_pool()):
        yield f


async def test_approval_pending_says_which_wave_who_may_approve_and_links_the_rollout_then_reminds_until_answered(
        env, task_queue, webhook_receiver: Receiver, monkeypatch):
    req = make_request(approvals={"approvers": ["alice", "bob_smith"], "gates": [{"wave": 2}, {"wave": 3}],
                                  "timeout_hours": 0.005, "remind_every_minutes": 0.05, "max_reminders": 2})
    async with _notifying_worker(env.client, webhook_receiver, task_queue, monkeypatch):
        h = await start(env.client, req, task_queue)
        await _until(lambda: bool(_with(webhook_receiver, "approval", "wave 2 (")), "approval_pending of wave 2")
        pending = _with(webhook_receiver, "approval", "wave 2 (")[0]
        assert "approval\u200b_pending" not in pending["text"]  # names inside words stay as typed
        assert "approval_pending" in pending["text"] and "ap-south-1/prod" in pending["text"]
        assert "alice, bob_smith" in pending["text"]  # the allow-list
        run = (await h.describe()).run_id
        link = f"{UI}/namespaces/default/workflows/{quote(h.id, safe='')}/{run}/user-metadata"
        assert f"<{link}|Open in the Temporal Web UI>" in pending["text"]
        fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in pending["blocks"][1]["fields"]}
        assert fields["*Wave*"] == "2" and fields["*Who may approve*"] == "alice, bob_smith" and "*Times out*" in fields
        assert fields["*Gates*"] == "wave-2" and fields["*Reminders left*"] == "2"

        await _until(lambda: bool(_with(webhook_receiver, "reminder 1: wave 2 (")), "the first reminder of wave 2")
        await h.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="alice"))
        # wave 3's gate is never answered: two reminders, then the gate times out and rejects the rollout
        with pytest.raises(WorkflowFailureError):
            await h.result()
        before, after = await _reminders_around_approval(h, wave=2)
    # None after the approval, read from the run's own order of events (not from how fast the approval arrived):
    # every wave-2 reminder was scheduled before the approval was accepted, and each reached the webhook once.
    assert before and not after, (before, after)
    assert len(_with(webhook_receiver, "approval_reminder", "wave 2 (")) == len(before)
    wave3 = _with(webhook_receiver, "approval_reminder", "wave 3 (")
    assert [("reminder 1:" in b["text"], "reminder 2:" in b["text"]) for b in wave3] == [(True, False), (False, True)]
    assert "k3y-s3cret" not in json.dumps(_posts(webhook_receiver))


async def test_holds_are_told_paused_window_and_queued_behind_the_lock(env, task_queue, webhook_receiver: Receiver,
                                                                       monkeypatch):
    today = datetime.now(UTC).date()
    frozen = {"name": "us-east-1", "traffic_share": 0.5, "freeze_dates": [str(today - timedelta(days=1)), str(today),
                                                                          str(today + timedelta(days=1))]}
    req = make_request(regions=[frozen, {"name": "eu-west-1", "traffic_share": 0.3},
                                {"name": "ap-south-1", "traffic_share": 0.2}],
                       approvals={"gates": [{"wave": 2}]})
    later = make_request(service=req.service, version="2.1.0")
    async with _notifying_worker(env.client, webhook_receiver, task_queue, monkeypatch):
        h = await start(env.client, req, task_queue)
        await h.execute_update(RolloutWorkflow.pause, Pause(by="carol", reason="hold *everything* <!channel>"))
        queued = await start(env.client, later, task_queue)
        await _until(lambda: bool(_with(webhook_receiver, "rollout_paused")), "rollout_paused")
        paused = _with(webhook_receiver, "rollout_paused")[0]
        assert "paused by carol" in paused["text"] and "&lt;!channel&gt;" in paused["text"]
        assert "<!channel>" not in json.dumps(paused) and " \u200b*everything\u200b* " in paused["text"]
        await _until(lambda: bool(_with(webhook_receiver, "rollout_queued", "2.1.0")), "rollout_queued of 2.1.0", 60)
        await h.execute_update(RolloutWorkflow.resume, Resume(by="carol"))
        await _until(lambda: bool(_with(webhook_receiver, "approval_pending")), "approval_pending")
        await h.execute_update(RolloutWorkflow.approve, Approve(wave=2, approver="dave"))
        await _until(lambda: bool(_with(webhook_receiver, "window_closed")), "window_closed")
        window = _with(webhook_receiver, "window_closed")[0]
        assert "us-east-1/test" in window["text"] and "override_window" in window["text"]
        await h.execute_update(RolloutWorkflow.override_window, OverrideWindow(stage="us-east-1/test", by="dave", reason="ok"))
        await _until(lambda: len(_with(webhook_receiver, "window_closed")) >= 2, "window_closed of us-east-1/prod")
        await h.execute_update(RolloutWorkflow.override_window, OverrideWindow(stage="us-east-1/prod", by="dave", reason="ok"))
        await h.result()
        await queued.result()
    assert len(_with(webhook_receiver, "window_closed", "us-east-1/test")) == 1  # told once per closed window
    assert not _with(webhook_receiver, "rollout_queued", f"{req.service} 2.0.0")  # the first got the lock at once


async def test_a_stage_held_on_failure_is_told_with_who_may_decide_when_it_times_out_and_a_link(
        env, task_queue, webhook_receiver: Receiver, monkeypatch):
    req = make_request(regions=[{"name": "us-east-1", "traffic_share": 1.0, "on_failure": "hold"}],
                       blast_radius={"canary_region": None}, approvals={"approvers": ["alice"]},
                       hold={"timeout_minutes": 0.1, "on_timeout": "rollback"})
    async with _notifying_worker(env.client, webhook_receiver, task_queue, monkeypatch) as f:
        f.scenario.effects = [VersionEffect(version="2.0.0", environments=["test"], latency_factor=1.8)]
        h = await start(env.client, req, task_queue)
        await _until(lambda: bool(_with(webhook_receiver, "rollout_held")), "rollout_held")
        with pytest.raises(WorkflowFailureError):  # nobody decides: the hold times out and rolls back
            await h.result()
    held = _with(webhook_receiver, "rollout_held")
    assert len(held) == 1 and "us-east-1/test failed and holds" in held[0]["text"] and "resolve_hold" in held[0]["text"]
    assert "it will rollback" in held[0]["text"]
    run = (await h.describe()).run_id
    assert f"<{UI}/namespaces/default/workflows/{quote(h.id, safe='')}/{run}/user-metadata|Open in the Temporal Web UI>" \
        in held[0]["text"]
    fields = {x["text"].split("\n")[0]: x["text"].split("\n")[1] for x in held[0]["blocks"][1]["fields"]}
    assert fields["*Who may decide*"] == "alice" and "*Times out*" in fields and fields["*Stages*"] == "us-east-1/test"


async def test_traffic_moves_are_told_at_the_start_each_step_and_the_end(env, task_queue, webhook_receiver: Receiver,
                                                                          monkeypatch, tmp_path):
    monkeypatch.setenv("TEST_WEBHOOK_URL", webhook_receiver.url)
    registry, _ = evacuation_helpers.simulated_registry()
    registry.notifier = WebhookNotifier([hook(events=frozenset({"traffic_started", "traffic_step", "traffic_ended"}))],
                                        backoff_seconds=0.01, ui_url=UI)
    svc = evacuation_helpers.service()
    async with evacuation_helpers.running_worker(env.client, registry, task_queue, tmp_path):
        h = await evacuation_helpers.start(env.client, evacuation_helpers.evacuation(svc), task_queue)
        result = await h.result()
    assert result.status == "evacuated", result.reason
    texts = [b["text"] for b in _posts(webhook_receiver)]
    assert [t.split("*: ", 1)[1].split(" — ")[0] for t in texts] == [
        "traffic_started", "traffic_step", "traffic_step", "traffic_step", "traffic_ended"]
    assert all("evacuate of eu-west-1" in t for t in texts) and "step 2/3 (33%)" in texts[2]
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in _posts(webhook_receiver)[-1]["blocks"][1]["fields"]}
    assert fields["*Region*"] == "eu-west-1" and fields["*Weights*"] == "ap-south-1 150, eu-west-1 0, us-east-1 150"
    assert f"{UI}/namespaces/default/workflows/{quote(h.id, safe='')}/" in texts[-1]


def test_the_targets_file_carries_the_ui_url_and_refuses_one_that_is_not_a_web_url():
    targets = parse_targets({"notifications": {"ui_url": UI, "webhooks": [{"name": "r", "url_env": "TEST_WEBHOOK_URL"}]}})
    registry = registry_from_targets(targets, SimulatedFleet())
    assert registry.notifier is not None and registry.notifier.ui_url == UI
    with pytest.raises(TargetsError) as err:
        parse_targets({"notifications": {"ui_url": "javascript:alert(1)"}})
    assert "notifications.ui_url: must be an http:// or https:// URL" in str(err.value)
