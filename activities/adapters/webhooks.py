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
from common.types import Notification

log = logging.getLogger(__name__)

_ICONS = {"started": ":rocket:", "completed": ":white_check_mark:", "failed": ":x:", "rolled_back": ":rewind:",
          "rollback": ":rewind:", "paused": ":double_vertical_bar:", "awaiting_approval": ":raising_hand:"}


@dataclass(frozen=True)
class Webhook:
    """One chat webhook; `events` empty means every event."""

    name: str
    url_env: str
    events: frozenset[str] = field(default_factory=frozenset)
    timeout_seconds: float = 5.0
    max_attempts: int = 2

    def wants(self, event: str) -> bool:
        return not self.events or event in self.events


def slack_payload(n: Notification) -> dict[str, object]:
    """Slack incoming-webhook JSON; `text` alone also works for Mattermost, Rocket.Chat and most chat tools."""
    icon = next((v for k, v in _ICONS.items() if k in n.event), ":information_source:")
    where = f" in {n.stage}" if n.stage else ""
    headline = f"{icon} *{n.service} {n.version}*{where}: {n.event}"
    return {
        "text": f"{headline} — {n.text}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"{headline}\n{n.text}"}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"rollout `{n.rollout_id}`"}]},
        ],
    }


class WebhookNotifier:
    """Posts notifications to the configured webhooks; returns whether every wanted webhook accepted it."""

    def __init__(self, webhooks: list[Webhook], *, transport: httpx.AsyncBaseTransport | None = None,
                 backoff_seconds: float = 0.5) -> None:
        self.webhooks = list(webhooks)
        self._transport = transport
        self.backoff_seconds = backoff_seconds

    async def send(self, n: Notification) -> bool:
        wanted = [w for w in self.webhooks if w.wants(n.event)]
        if not wanted:
            return True
        results = await asyncio.gather(*(self._post(w, n) for w in wanted))
        return all(results)

    async def _post(self, hook: Webhook, n: Notification) -> bool:
        failed = f"could not deliver {n.event} of {n.rollout_id}"
        target = f"POST webhook {hook.name}"  # never the URL: it holds the key
        try:
            url = resolve_secret(hook.url_env, f"webhook {hook.name}")
        except SecretError as err:
            log.debug("webhook %s: %s", hook.name, err)
            log.warning("%s", NotifyError(failed, target=target, status=f"{hook.url_env} is not set",
                                          hint="export it in the worker's environment (the targets file only names it)"))
            return False
        payload = slack_payload(n)
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
