"""Which adapter serves which region and environment. Built once per worker from a targets file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from activities.adapters import Deployer, MetricSource
from activities.models import StageRef
from activities.simulated import SimulatedFleet

if TYPE_CHECKING:  # keep this module light: the real adapters import boto3, httpx and kubernetes
    from activities.notify import WebhookNotifier
    from activities.route53 import RegionTraffic


@dataclass
class AdapterRegistry:
    """Looks up the deployer and metric source of a stage; falls back to the defaults."""

    default_deployer: Deployer
    default_metrics: MetricSource
    deployers: dict[str, Deployer] = field(default_factory=dict)  # key: "region/env"
    metric_sources: dict[str, MetricSource] = field(default_factory=dict)
    traffic: dict[str, "RegionTraffic"] = field(default_factory=dict)  # key: "region/env"; Route 53 weighted record
    notifier: "WebhookNotifier | None" = None  # None: notifications are only logged

    def deployer(self, stage: StageRef) -> Deployer:
        return self.deployers.get(stage.key, self.default_deployer)

    def metrics(self, stage: StageRef) -> MetricSource:
        return self.metric_sources.get(stage.key, self.default_metrics)

    def traffic_for(self, stage: StageRef) -> "RegionTraffic | None":
        """The stage's Route 53 weighted record, or None when the targets file gives none."""
        return self.traffic.get(stage.key)

    @classmethod
    def simulated(cls, fleet: SimulatedFleet) -> "AdapterRegistry":
        return cls(default_deployer=fleet, default_metrics=fleet)
