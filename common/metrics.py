"""Bifrost's own metrics: every name, label and bucket in one place, emitted through Temporal's metric meter.

Workflows pass `workflow.metric_meter()` (replay-safe: nothing is counted twice when a history is replayed),
activities `activity.metric_meter()`; the worker's Prometheus endpoint (`bifrost worker --metrics-port`)
serves them beside the SDK's own `temporal_*` metrics. Names follow Prometheus conventions (unit in the
name, `_total` on counters) and every label has a bounded set of values: a service, region, environment,
status, verdict, gate or error kind, never a version, a workflow id or a free-text reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only the meter's interface: this module does no I/O and needs no SDK to import
    from temporalio.common import MetricMeter

# -- names (the dashboard and the alerting rules in deploy/ use these) ------------------------------------------
ROLLOUT_STATUS_ENTERED = "bifrost_rollout_status_entered_total"  # {service, status}
ROLLOUT_STATUS_LEFT = "bifrost_rollout_status_left_total"  # {service, status}; entered - left = rollouts in it now
ROLLOUT_WAIT = "bifrost_rollout_wait_seconds"  # {service, gate}: time held at a gate, window, pause or lock
STAGES_ENDED = "bifrost_stages_ended_total"  # {region, environment, outcome}
STAGE_DURATION = "bifrost_stage_duration_seconds"  # {region, environment, outcome}
ANALYSES = "bifrost_canary_analyses_total"  # {region, environment, verdict}
SOAK_LOOKS = "bifrost_soak_looks_total"  # {region, environment}
SOAK_ALARMS = "bifrost_soak_alarms_total"  # {region, environment}
EVACUATION_STATUS_ENTERED = "bifrost_evacuation_status_entered_total"  # {service, region, status}
EVACUATION_STEPS = "bifrost_evacuation_steps_total"  # {service, region}
TRAFFIC_WEIGHT = "bifrost_traffic_weight"  # {service, environment, region}: the record's weight last read or set
REPORT_DRAW = "bifrost_report_draw_seconds"  # {kind}: canary | soak
ADAPTER_ERRORS = "bifrost_adapter_errors_total"  # {activity, kind}

# Gates a rollout waits at, by the status it waits in.
WAIT_GATES: Mapping[str, str] = {
    "queued": "lock", "awaiting_approval": "approval", "waiting_window": "window", "paused": "pause",
    "held": "failure",
    "waiting_traffic": "traffic",
}

# Histogram buckets (seconds), given to the worker's Prometheus exporter.
BUCKETS: Mapping[str, list[float]] = {
    ROLLOUT_WAIT: [1, 10, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600],
    STAGE_DURATION: [10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600],
    REPORT_DRAW: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
}

DESCRIPTIONS: Mapping[str, str] = {
    ROLLOUT_STATUS_ENTERED: "Rollouts that entered a status",
    ROLLOUT_STATUS_LEFT: "Rollouts that left a status",
    ROLLOUT_WAIT: "Seconds a rollout was held at a gate (approval, window, pause, lock) before it went on",
    STAGES_ENDED: "Stages that ended, by outcome",
    STAGE_DURATION: "Seconds from a stage's start to its end, by outcome",
    ANALYSES: "Canary analyses judged, by verdict",
    SOAK_LOOKS: "Soak monitor looks taken",
    SOAK_ALARMS: "Soak monitor looks that raised an alarm",
    EVACUATION_STATUS_ENTERED: "Evacuations and restores that entered a status",
    EVACUATION_STEPS: "Traffic steps an evacuation or restore took",
    TRAFFIC_WEIGHT: "A region's weight in its service's weighted record set, as last read or set",
    REPORT_DRAW: "Seconds spent drawing a canary or soak report",
    ADAPTER_ERRORS: "Activities that failed on an adapter error, by error kind",
}


def _count(meter: MetricMeter, name: str, labels: Mapping[str, str], value: int = 1) -> None:
    meter.create_counter(name, DESCRIPTIONS[name]).add(value, dict(labels))


def _seconds(meter: MetricMeter, name: str, labels: Mapping[str, str], seconds: float) -> None:
    meter.create_histogram_float(name, DESCRIPTIONS[name], "s").record(max(0.0, seconds), dict(labels))


def rollout_status_changed(meter: MetricMeter, *, service: str, before: str | None, after: str,
                           since: datetime | None, now: datetime) -> None:
    """A rollout moved from `before` (None: it just started) to `after`; a wait at a gate it left is timed."""
    if before == after:
        return
    if before is not None:
        _count(meter, ROLLOUT_STATUS_LEFT, {"service": service, "status": before})
        gate = WAIT_GATES.get(before)
        if gate is not None and since is not None:
            _seconds(meter, ROLLOUT_WAIT, {"service": service, "gate": gate}, (now - since).total_seconds())
    _count(meter, ROLLOUT_STATUS_ENTERED, {"service": service, "status": after})


def stage_ended(meter: MetricMeter, *, region: str, environment: str, outcome: str,
                started: datetime | None, ended: datetime) -> None:
    """A stage ended with `outcome` (succeeded, rolled_back, skipped, failed)."""
    labels = {"region": region, "environment": environment, "outcome": outcome}
    _count(meter, STAGES_ENDED, labels)
    if started is not None:
        _seconds(meter, STAGE_DURATION, labels, (ended - started).total_seconds())


def canary_analysed(meter: MetricMeter, *, region: str, environment: str, verdict: str) -> None:
    _count(meter, ANALYSES, {"region": region, "environment": environment, "verdict": verdict})


def soak_looked(meter: MetricMeter, *, region: str, environment: str, alarm: bool) -> None:
    labels = {"region": region, "environment": environment}
    _count(meter, SOAK_LOOKS, labels)
    if alarm:
        _count(meter, SOAK_ALARMS, labels)


def evacuation_status_changed(meter: MetricMeter, *, service: str, region: str, before: str | None, after: str) -> None:
    if before != after:
        _count(meter, EVACUATION_STATUS_ENTERED, {"service": service, "region": region, "status": after})


def evacuation_step(meter: MetricMeter, *, service: str, region: str) -> None:
    _count(meter, EVACUATION_STEPS, {"service": service, "region": region})


def traffic_weights(meter: MetricMeter, *, service: str, environment: str, weights: Mapping[str, int]) -> None:
    """The weight of each region of a service's record set, as just read or set.

    One series per region whichever activity read it: the activity meter's `activity_type` is overridden, else
    plan_traffic's reading from before a shift would stand beside set_weights' after it."""
    gauge = meter.with_additional_attributes({"activity_type": "traffic"}).create_gauge(
        TRAFFIC_WEIGHT, DESCRIPTIONS[TRAFFIC_WEIGHT])
    for region, weight in weights.items():
        gauge.set(int(weight), {"service": service, "environment": environment, "region": region})


def report_drawn(meter: MetricMeter, *, kind: str, seconds: float) -> None:
    _seconds(meter, REPORT_DRAW, {"kind": kind}, seconds)


def adapter_error(meter: MetricMeter, *, activity: str, kind: str) -> None:
    _count(meter, ADAPTER_ERRORS, {"activity": activity, "kind": kind})
