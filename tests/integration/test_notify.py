"""Webhook notifications against a local HTTP receiver: delivered as Slack JSON, and never raising on failure."""

from __future__ import annotations

import logging
import threading

import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.webhooks import Webhook, WebhookNotifier
from activities.notify import NotifyActivities
from common.types import Notification
from tests.integration.conftest import Receiver, assert_one_line

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
