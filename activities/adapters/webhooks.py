"""Webhook notifications (Slack-compatible JSON) for rollout and stage events.

A notification is best effort: a failure is logged and reported as False, never raised, so a broken chat
integration can never fail or stall a rollout. Webhook URLs carry keys, so they are read from the
environment at send time and redacted from every log line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from activities.adapters.base import NotifyError, http_status
from activities.adapters.secrets import SecretError, redact, resolve_secret
from common.links import workflow_link
from common.notices import is_urgent
from common.text import slack
from common.types import Notification

log = logging.getLogger(__name__)

_ICONS = {"promoted_failed": ":rotating_light:", "approval": ":raising_hand:", "window": ":clock3:", "queued": ":hourglass_flowing_sand:",
          "traffic": ":twisted_rightwards_arrows:", "started": ":rocket:", "completed": ":white_check_mark:",
          "failed": ":x:", "rolled_back": ":rewind:", "rollback": ":rewind:", "paused": ":double_vertical_bar:",
          "held": ":warning:"}
URGENT_ICON = ":rotating_light:"  # a rollback, a failure hold, an automatic evacuation: never the routine icon
HELD = "held"  # a webhook's `events` entry that picks every notification the rollout waits on (a hold)


@dataclass(frozen=True)
class Webhook:
    """One chat webhook; `events` empty means every event ("held" picks every hold: approval, window, pause, lock, failure)."""

    name: str
    url_env: str
    events: frozenset[str] = field(default_factory=frozenset)
    timeout_seconds: float = 5.0
    max_attempts: int = 2

    def wants(self, event: str, hold: str | None = None) -> bool:
        return not self.events or event in self.events or (hold is not None and HELD in self.events)


def _s(text: str) -> str:
    """Free text for Slack mrkdwn: credentials masked first, then escaped (`common.text.slack`)."""
    return slack(redact(text))


def _fields(n: Notification) -> list[tuple[str, str]]:
    """The facts a person acts on, as (label, value) pairs: only those the notification carries."""
    rows: list[tuple[str, str]] = []
    if n.wave is not None:
        rows.append(("Wave", str(n.wave)))
    if n.waits_for is not None:
        rows.append(("Waits for", n.waits_for))
    if n.stages:
        rows.append(("Stages", ", ".join(n.stages)))
    if n.gates:
        rows.append(("Gates", ", ".join(n.gates)))
    if n.hold in ("approval", "failure"):
        rows.append(("Who may approve" if n.hold == "approval" else "Who may decide",
                     ", ".join(n.approvers) or "anyone who may send updates"))
    if n.until is not None:
        rows.append(("Times out" if n.hold in ("approval", "failure") else "Opens", f"{n.until:%Y-%m-%d %H:%M} UTC"))
    if n.reminders_left is not None:
        rows.append(("Reminders left", str(n.reminders_left)))
    if n.region is not None:
        rows.append(("Region", n.region))
    if n.weights:
        rows.append(("Weights", ", ".join(f"{k} {v}" for k, v in sorted(n.weights.items()))))
    if n.region is not None:  # a traffic change: what moved it and why
        rows.append(("Started by", f"{n.started_by} ({n.requested_by or '?'})" if n.started_by else n.requested_by or "?"))
        rows.append(("Why", n.why or "no reason given"))
    return rows


def slack_payload(n: Notification, link: str | None = None) -> dict[str, object]:
    """Slack incoming-webhook JSON a chat service posts as it is; `text` alone also works for Mattermost,
    Rocket.Chat and most chat tools. Every value is escaped for Slack mrkdwn and masked for credentials;
    `link` (the Web UI page) must be a URL from `workflow_link`."""
    urgent = is_urgent(n)
    icon = URGENT_ICON if urgent else next((v for k, v in _ICONS.items() if k in n.event), ":information_source:")
    what = f"{n.service} {n.version}".strip()
    where = f" in {_s(n.stage)}" if n.stage else ""
    headline = f"{icon} {'*URGENT* ' if urgent else ''}*{_s(what)}*{where}: {_s(n.event)}"
    body = _s(n.text)
    open_it = f"<{link}|Open in the Temporal Web UI>" if link else ""
    text = f"{headline} — {body}" + (f" — {open_it}" if open_it else "")
    blocks: list[dict[str, object]] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"{headline}\n{body}"}}]
    fields = _fields(n)
    if fields:
        blocks.append({"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{label}*\n{_s(value)}"}
                                                     for label, value in fields[:10]]})  # Slack allows 10 fields
    context = f"rollout `{_s(n.rollout_id)}`" if n.version else f"workflow `{_s(n.rollout_id)}`"
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context + (f" · {open_it}" if open_it else "")}]})
    return {"text": text, "blocks": blocks}


class WebhookNotifier:
    """Posts notifications to the configured webhooks; returns whether every wanted webhook accepted it."""

    def __init__(self, webhooks: list[Webhook], *, transport: httpx.AsyncBaseTransport | None = None,
                 backoff_seconds: float = 0.5, ui_url: str | None = None) -> None:
        self.webhooks = list(webhooks)
        self.ui_url = ui_url  # the Temporal Web UI's base URL (targets file `notifications.ui_url`): links in messages
        self._transport = transport
        self.backoff_seconds = backoff_seconds

    async def send(self, n: Notification, *, namespace: str = "default", run_id: str | None = None) -> bool:
        """Post `n` to every webhook that wants it, with a link to workflow `n.rollout_id` (`run_id`) in the Web UI."""
        wanted = [w for w in self.webhooks if w.wants(n.event, n.hold)]
        if not wanted:
            return True
        payload = slack_payload(n, workflow_link(self.ui_url, namespace, n.rollout_id, run_id))
        results = await asyncio.gather(*(self._post(w, n, payload) for w in wanted))
        return all(results)

    async def _post(self, hook: Webhook, n: Notification, payload: dict[str, object]) -> bool:
        failed = f"could not deliver {n.event} of {n.rollout_id}"
        target = f"POST webhook {hook.name}"  # never the URL: it holds the key
        try:
            url = resolve_secret(hook.url_env, f"webhook {hook.name}")
        except SecretError as err:
            log.debug("webhook %s: %s", hook.name, err)
            log.warning("%s", NotifyError(failed, target=target, status=f"{hook.url_env} is not set",
                                          hint="export it in the worker's environment (the targets file only names it)"))
            return False
        error: NotifyError | None = None
        try:
            async with httpx.AsyncClient(timeout=hook.timeout_seconds, transport=self._transport) as client:
                for attempt in range(1, hook.max_attempts + 1):
                    try:
                        resp = await client.post(url, json=payload)
                        if resp.status_code < 300:
                            return True
                        error = NotifyError(failed, target=target, status=http_status(resp.status_code),
                                            detail=_redact_url(resp.text, url), hint=_hint(resp.status_code, hook, attempt))
                        if resp.status_code < 500 and resp.status_code != 429:
                            break  # a 4xx will not get better by retrying (revoked key, bad channel)
                    except httpx.TimeoutException:
                        error = NotifyError(failed, target=target, status=f"no answer within {hook.timeout_seconds:g}s",
                                            hint=f"the chat service did not answer ({attempt} attempts); the rollout "
                                                 "goes on without this message")
                    except httpx.HTTPError as err:
                        error = NotifyError(failed, target=target, status="connection failed",
                                            detail=_redact_url(f"{type(err).__name__}: {err}", url),
                                            hint=f"check the URL in {hook.url_env} and the network from the worker "
                                                 f"({attempt} attempts)")
                    if attempt < hook.max_attempts:
                        await asyncio.sleep(self.backoff_seconds * attempt)
        except Exception as err:  # never let a notification break the caller
            error = NotifyError(failed, target=target, status=type(err).__name__,
                                detail=_redact_url(str(err), url), hint="please report it with this line")
        log.warning("%s", error)
        return False


def _hint(status: int, hook: Webhook, attempts: int) -> str:
    """What to do about a chat service's answer."""
    if status in (401, 403, 404, 410):
        return f"the chat service rejected the webhook or its key was revoked; put a fresh webhook URL in {hook.url_env}"
    if status == 429 or status >= 500:
        return f"the chat service is failing or rate-limiting ({attempts} attempts); the rollout goes on without this message"
    return "the chat service refused the message; check the webhook's channel and that it accepts Slack-style JSON"


def _redact_url(text: str, url: str) -> str:
    """`text` without the webhook URL, nor its path or query on their own (either may hold the key)."""
    parts = urlsplit(url)
    return redact(text, url, parts.path if len(parts.path) > 1 else None, parts.query or None)
