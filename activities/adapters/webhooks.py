"""Webhook notifications (Slack-compatible JSON) for rollout and stage events.

A notification is best effort: a failure is logged and reported as False, never raised, so a broken chat
integration can never fail or stall a rollout. Webhook URLs carry keys, so they are read from the
environment at send time and redacted from every log line.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import httpx

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
        try:
            url = resolve_secret(hook.url_env, f"webhook {hook.name}")
        except SecretError as err:
            log.warning("notification %s for %s not sent: %s", n.event, n.rollout_id, err)
            return False
        payload = slack_payload(n)
        last = ""
        try:
            async with httpx.AsyncClient(timeout=hook.timeout_seconds, transport=self._transport) as client:
                for attempt in range(1, hook.max_attempts + 1):
                    try:
                        resp = await client.post(url, json=payload)
                        if resp.status_code < 300:
                            return True
                        last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                        if resp.status_code < 500 and resp.status_code != 429:
                            break  # a 4xx will not get better by retrying (revoked key, bad channel)
                    except httpx.HTTPError as err:
                        last = f"{type(err).__name__}: {err}"
                    if attempt < hook.max_attempts:
                        await asyncio.sleep(self.backoff_seconds * attempt)
        except Exception as err:  # never let a notification break the caller
            last = f"{type(err).__name__}: {err}"
        log.warning("notification %s for %s not delivered to webhook %s: %s", n.event, n.rollout_id, hook.name,
                    redact(last, url))
        return False
