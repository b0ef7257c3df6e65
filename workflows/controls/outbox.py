"""The outbox: what a workflow sends without waiting for it (notices to people, signals to its stages) and the
watchers it lets run beside it. A notice never delays or fails a workflow; the workflow waits for what it sent
(`flush`) only before it ends or continues as new, so the notices of its last moments still go out.

    self.outbox = Outbox(about={"rollout_id": wid, "service": svc, "version": ver})
    self.outbox.tell("rollout_started", "rolling out across 3 waves")       # a Notification of `about` + these
    self.outbox.send(notices.paused(...))                                    # a Notification built elsewhere
    self.outbox.add(handle.signal(...))                                      # any other fire-and-forget command
    self.outbox.watch(self._notice_if_queued())                              # a watcher: runs on, never awaited
    await self.outbox.flush()                                                # before the end / continue-as-new

Every notice is the same activity call (`NotifyActivities.notify`, options.NOTIFY, summary "notify <event>").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.notify import NotifyActivities
    from common.notices import is_urgent
    from common.types import Notification
    from workflows import options


class Outbox:
    """One workflow's notices and other sends in flight, and its background watchers.

    `at_once`: schedule a notice's activity when it is sent, before whatever the workflow does next in this
    workflow task (the region guard's way); otherwise it is scheduled when the workflow next yields, after the
    commands that follow in this task (the rollout's, the evacuation's and the revert's way). Either way the
    workflow does not wait; the two orders give different histories, so each workflow keeps the one it recorded.
    `about`: the fields every notice of `tell` carries (which workflow, service, version); `cut`: the most text a
    notice of `tell` carries (None: all of it)."""

    def __init__(self, *, about: Mapping[str, str] | None = None, at_once: bool = False, cut: int | None = None) -> None:
        self.about = dict(about or {})
        self.at_once = at_once
        self.cut = cut
        self._pending: list[asyncio.Future[Any]] = []
        self._watchers: list[asyncio.Future[Any]] = []

    def tell(self, event: str, text: str, **fields: Any) -> None:
        """Send a notice of this workflow (`about`): `event`, `text` and any other Notification fields."""
        self.send(Notification(**self.about, event=event, text=text if self.cut is None else text[:self.cut], **fields))

    def send(self, notice: Notification) -> None:
        """Send a notice without waiting for it: the `notify` activity, summary "notify <event>"; marked urgent
        when it is (common.notices.is_urgent)."""
        notice.urgent = is_urgent(notice)  # a rollback, a failure hold: whoever built the notice
        if self.at_once:
            self._pending.append(workflow.start_activity_method(
                NotifyActivities.notify, notice, summary=f"notify {notice.event}", **options.NOTIFY))
        else:
            self._pending.append(asyncio.ensure_future(workflow.execute_activity_method(
                NotifyActivities.notify, notice, summary=f"notify {notice.event}", **options.NOTIFY)))

    def add(self, sending: Awaitable[Any]) -> None:
        """Any other send the workflow does not wait for (a signal to a stage, a report started): flushed too."""
        self._pending.append(asyncio.ensure_future(sending))

    def watch(self, watcher: Coroutine[Any, Any, Any]) -> None:
        """Run a watcher beside the workflow (a notice sent if a hold lasts, reminders); never awaited by `flush`."""
        self._watchers.append(asyncio.ensure_future(watcher))

    def prune(self) -> None:
        """Forget what has been sent (a long-lived loop keeps only what is still in flight)."""
        self._pending = [f for f in self._pending if not f.done()]

    @property
    def in_flight(self) -> int:
        """How many sends have not finished yet."""
        return sum(1 for f in self._pending if not f.done())

    async def flush(self) -> None:
        """Wait for everything sent so far (best effort: a failed send is ignored), then forget it."""
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending, return_exceptions=True)
