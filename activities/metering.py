"""The running activity's metric meter (Temporal's, served on the worker's metrics endpoint), or a no-op one outside an activity."""

from __future__ import annotations

from temporalio import activity
from temporalio.common import MetricMeter


def meter() -> MetricMeter:
    """`activity.metric_meter()` inside an activity; outside one (a test calling the method directly) a meter that drops everything."""
    return activity.metric_meter() if activity.in_activity() else MetricMeter.noop
