"""What Bifrost tells people when they are needed: one pure builder per event, shared by workflows and tests.

A notice says what a person must do and by when: an approval pending (which wave, which gates, who may
approve, when it times out) and its reminders, a closed deployment window the rollout waits for, a hold
(paused, a rollout or revert queued behind the service lock, a stage held on failure), and traffic moving (an evacuation or restore starting, each step,
its end). The text is plain: the webhook adapter escapes it for the chat service and adds the Web UI link.
"""

from __future__ import annotations

from datetime import datetime

from common.types import Notification

# Every event Bifrost sends, for the targets file's `events` filter (docs/targets.md). "held" picks every hold.
APPROVAL_PENDING = "approval_pending"
APPROVAL_REMINDER = "approval_reminder"
WINDOW_CLOSED = "window_closed"
ROLLOUT_PAUSED = "rollout_paused"
ROLLOUT_QUEUED = "rollout_queued"
ROLLOUT_HELD = "rollout_held"  # a stage failed with on_failure: hold and waits for a release manager
# URGENT: a held stage's timeout promoted its failed canary (hold.on_timeout: promote); a hold event (`held` picks it)
HOLD_PROMOTED_FAILED = "hold_promoted_failed"
TRAFFIC_STARTED = "traffic_started"
TRAFFIC_STEP = "traffic_step"
TRAFFIC_ENDED = "traffic_ended"
REVERT_STARTED = "revert_started"
REVERT_FINISHED = "revert_finished"
REVERT_FAILED = "revert_failed"
REVERT_QUEUED = "revert_queued"  # a revert waits behind a running rollout of its service
CANARY_STEP = "canary_step"  # canary.traffic: a step's weights were set, or the canary withdrawn to weight 0
HELD = "held"


# a person should act now: a rollback, a rollout that failed, a failure hold and its timeout, a revert that stopped
URGENT_EVENTS = frozenset({"rollout_rolled_back", "rollout_failed", "stage_rolled_back", "stage_failed", ROLLOUT_HELD,
                           HOLD_PROMOTED_FAILED, REVERT_FAILED})
GUARD_PREFIX = "guard/"  # the region guard's workflow ids: a traffic change it started is automatic


def is_urgent(n: Notification) -> bool:
    """Whether a notice must stand out: marked so (an evacuation the guard started on its own), an urgent event, or a
    failure hold."""
    return n.urgent or n.event in URGENT_EVENTS or n.hold == "failure"


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M} UTC" if at is not None else "never"


def approval_pending(*, rollout_id: str, service: str, version: str, wave: int, gates: list[str], stages: list[str],
                     approvers: list[str], times_out_at: datetime, reminder: int = 0,
                     reminders_left: int | None = None) -> Notification:
    """Wave `wave` waits for an approval; `reminder` > 0 for the n-th reminder while it still waits."""
    who = ", ".join(approvers) if approvers else "anyone who may send updates"
    text = (f"wave {wave} ({', '.join(stages)}) waits for approval of {', '.join(gates)}; may approve: {who}; "
            f"rejected automatically at {_when(times_out_at)}")
    if reminder:
        text = f"reminder {reminder}: {text}"
    return Notification(rollout_id=rollout_id, service=service, version=version,
                        event=APPROVAL_REMINDER if reminder else APPROVAL_PENDING, text=text, hold="approval",
                        wave=wave, stages=list(stages), gates=list(gates), approvers=list(approvers), reminder=reminder,
                        reminders_left=reminders_left, until=times_out_at)


def window_closed(*, rollout_id: str, service: str, version: str, wave: int, stages: list[str],
                  opens_at: datetime | None) -> Notification:
    """Wave `wave` waits for the deployment window of `stages`; None: no window opens within 400 days."""
    text = (f"wave {wave} waits for the deployment window of {', '.join(stages)}; it opens {_when(opens_at)} "
            "(an approver may start it earlier with override_window)")
    return Notification(rollout_id=rollout_id, service=service, version=version, event=WINDOW_CLOSED, text=text,
                        hold="window", wave=wave, stages=list(stages), until=opens_at)


def paused(*, rollout_id: str, service: str, version: str, by: str, reason: str, where: str) -> Notification:
    """The rollout holds at a safe point because `by` paused it."""
    return Notification(rollout_id=rollout_id, service=service, version=version, event=ROLLOUT_PAUSED,
                        text=f"held before {where}: paused by {by} ({reason or 'no reason given'}); resume to go on",
                        hold="paused")


def queued(*, rollout_id: str, service: str, version: str) -> Notification:
    """The rollout waits for the service lock: another rollout of the service holds it."""
    return Notification(rollout_id=rollout_id, service=service, version=version, event=ROLLOUT_QUEUED,
                        text=f"queued: another {service} rollout holds the service lock; this one starts when it ends",
                        hold="lock")


def held(*, rollout_id: str, service: str, version: str, stage: str, wave: int, reason: str, approvers: list[str],
         times_out_at: datetime, on_timeout: str) -> Notification:
    """Stage `stage` failed and holds (canary and baseline still running) until someone retries, promotes or
    rolls it back; at `times_out_at` the hold takes the request's default action `on_timeout`."""
    who = ", ".join(approvers) if approvers else "anyone who may send updates"
    text = (f"{stage} failed and holds with its canary and baseline running: {reason}; decide with resolve_hold "
            f"(retry, promote or rollback); may decide: {who}; at {_when(times_out_at)} it will {on_timeout}")
    return Notification(rollout_id=rollout_id, service=service, version=version, event=ROLLOUT_HELD, text=text,
                        hold="failure", stage=stage, wave=wave, stages=[stage], approvers=list(approvers),
                        until=times_out_at)


def promoted_on_timeout(*, rollout_id: str, service: str, version: str, stage: str, wave: int, text: str) -> Notification:
    """URGENT: nobody decided on stage `stage`'s hold in time and its failed canary was promoted
    (hold.on_timeout: promote); `text` is the audit line."""
    return Notification(rollout_id=rollout_id, service=service, version=version, event=HOLD_PROMOTED_FAILED,
                        text=f"URGENT: {stage}: {text}", hold="failure", stage=stage, wave=wave, stages=[stage])


def canary_step(*, rollout_id: str, service: str, version: str, stage: str, text: str,
                weights: dict[str, int], rollout_run: str | None = None) -> Notification:
    """A weighted canary moved: a step's weights are in force, or canary and baseline were withdrawn to 0. Sent by
    the stage; `rollout_run` (the rollout's run the stage checked it serves) lets the link open that run's page."""
    return Notification(rollout_id=rollout_id, service=service, version=version, event=CANARY_STEP,
                        text=f"{stage}: {text}", stage=stage, stages=[stage], weights=dict(weights), run_id=rollout_run)


def traffic(*, workflow_id: str, service: str, direction: str, region: str, event: str, text: str,
            weights: dict[str, int], started_by: str | None = None, requested_by: str = "", why: str = "") -> Notification:
    """Traffic of `region` moves (an evacuation or restore): started, a step, or ended; each notice names what
    moved it (`started_by`: the rollout, guard, drill or revert whose child it is; None: a person) and why."""
    by = f"{started_by} ({requested_by})" if started_by else requested_by or "?"
    n = Notification(rollout_id=workflow_id, service=service, version="", event=event,
                     text=f"{direction} of {region}: {text}; started by {by}: {why or 'no reason given'}", region=region,
                     weights=dict(weights), started_by=started_by, requested_by=requested_by or None, why=why or None)
    n.urgent = direction == "evacuate" and started_by is not None and started_by.startswith(GUARD_PREFIX)
    return n


def revert(*, revert_id: str, service: str, version: str, event: str, text: str, stages: list[str]) -> Notification:
    """A revert of `service` to `version` started, finished, or stopped part-way (`text` says where and why)."""
    return Notification(rollout_id=revert_id, service=service, version=version, event=event, text=f"revert: {text}",
                        stages=list(stages))


def revert_queued(*, revert_id: str, service: str, version: str, waits_for: str | None) -> Notification:
    """A revert waits for the service lock: `waits_for` (the rollout holding it, as the lock says) runs; None: the
    lock could not say who."""
    who = waits_for or f"another {service} rollout"
    text = (f"revert: queued behind {who}; it starts when that rollout ends, and then undoes the latest finished "
            f"release of {service} (abort it to stop waiting)")
    return Notification(rollout_id=revert_id, service=service, version=version, event=REVERT_QUEUED, text=text,
                        hold="lock", waits_for=waits_for)
