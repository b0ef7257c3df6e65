"""The `notify` activity: tell humans about rollout and stage events. Best effort: it never raises."""

from __future__ import annotations

import logging

from temporalio import activity

from activities.adapters.registry import AdapterRegistry
from activities.adapters.secrets import redact
from activities.adapters.webhooks import WebhookNotifier
from common.namespaces import home_namespace
from common.types import Notification

log = logging.getLogger(__name__)


class NotifyActivities:
    """The `notify` activity; built from the registry's notifier (no notifier: notifications are only logged)."""

    def __init__(self, registry: AdapterRegistry | None = None, notifier: WebhookNotifier | None = None) -> None:
        self.notifier = notifier if notifier is not None else (registry.notifier if registry is not None else None)

    @activity.defn(name="notify")
    async def notify(self, n: Notification) -> bool:
        """Send `n` to the webhooks that want its event; True when all accepted it. Never raises."""
        log.info("notify %s %s %s: %s", n.rollout_id, n.event, n.stage or "", redact(n.text))
        if self.notifier is None:
            return True
        info = activity.info()
        own = info.workflow_id == n.rollout_id  # else a notice about a rollout, sent from its machinery: its page
        namespace = info.workflow_namespace or "default"
        try:  # the run's Current Details: its own, or the rollout's run the stage serves (else the latest run's page)
            return await self.notifier.send(n, namespace=namespace if own else home_namespace(namespace),
                                            run_id=info.workflow_run_id if own else n.run_id)
        except Exception as err:  # defensive: the contract is "never fails a rollout"
            log.warning("notification %s for %s failed: %s", n.event, n.rollout_id, type(err).__name__)
            return False
