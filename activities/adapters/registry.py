"""Which adapter serves which region and environment, and where reports go, built once per worker from a targets file.

The real adapters are imported only when a targets file asks for them (they pull in boto3, httpx and
kubernetes); a stage the file does not cover is served by `Unconfigured`, which refuses every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activities.adapters.base import Deployer, DeployError, MetricsError, MetricSource
from activities.adapters.reports import LocalReportStore, ReportStore, S3ReportStore
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.targets import (
    AwsConfig,
    CloudWatchConfig,
    KubernetesDeployerConfig,
    LocalReportsConfig,
    PrometheusConfig,
    ReportsConfig,
    SimulatedDeployerConfig,
    SimulatedMetricsConfig,
    TargetsFile,
)
from common.types import StageRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from activities.adapters.route53 import RegionTraffic
    from activities.adapters.webhooks import WebhookNotifier


@dataclass
class AdapterRegistry:
    """Looks up the deployer and metric source of a stage; falls back to the defaults."""

    default_deployer: Deployer
    default_metrics: MetricSource
    deployers: dict[str, Deployer] = field(default_factory=dict)  # key: "region/env"
    metric_sources: dict[str, MetricSource] = field(default_factory=dict)
    traffic: dict[str, "RegionTraffic"] = field(default_factory=dict)  # key: "region/env"; Route 53 weighted record
    notifier: "WebhookNotifier | None" = None  # None: notifications are only logged
    reports: ReportStore | None = None  # from the targets file's `reports`; None: the worker's local folder

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


def _aws_connection(aws: AwsConfig) -> Any:
    from activities.adapters.aws import AwsConnection

    return AwsConnection(
        endpoint_url=aws.endpoint_url, profile=aws.profile, access_key_id_env=aws.access_key_id_env,
        secret_access_key_env=aws.secret_access_key_env, session_token_env=aws.session_token_env,
        timeout_seconds=aws.timeout_seconds, max_attempts=aws.max_attempts,
    )


def report_store_from_config(
    config: ReportsConfig | None, aws: AwsConfig | None = None, *,
    local_dir: str | Path | None = None, local_base_url: str | None = None, prefer_local_base_url: bool = False,
) -> ReportStore:
    """The report store a `reports` section describes (None: the local folder).

    For a local store, `local_dir` overrides the file's `dir`, and `local_base_url` is used when the file
    names no `public_base_url` (the worker passes http://127.0.0.1:PORT when it serves the folder), or
    always with `prefer_local_base_url` (the worker's --reports-url)."""
    if config is None:
        config = LocalReportsConfig(kind="local")
    if isinstance(config, LocalReportsConfig):
        base = local_base_url if prefer_local_base_url else (config.public_base_url or local_base_url)
        return LocalReportStore(local_dir or config.dir, base)
    connection = _aws_connection(aws or AwsConfig())
    return S3ReportStore(
        config.bucket, functools.partial(connection.client, "s3", config.aws_region), prefix=config.prefix,
        public_base_url=config.public_base_url, presign_expires_seconds=config.presign_expires_seconds,
    )


class _Builder:
    """Builds adapters once per distinct configuration, sharing API clients between targets."""

    def __init__(self, targets: TargetsFile, fleet: SimulatedFleet) -> None:
        self.targets = targets
        self.fleet = fleet
        self._kube_clients: dict[tuple[Any, ...], Callable[[], "ApiClient"]] = {}

    def _kube_factory(self, c: KubernetesDeployerConfig) -> Callable[[], "ApiClient"]:
        key = (c.api_url, c.token_env, c.verify_tls, c.ca_file, c.kubeconfig, c.context)
        if key not in self._kube_clients:
            from activities.adapters.kubernetes.deployer import kube_api_client

            cache: list[ApiClient] = []

            def factory() -> "ApiClient":  # created on first use, inside an activity, so the token is read there
                if not cache:
                    cache.append(kube_api_client(kubeconfig=c.kubeconfig, context=c.context, api_url=c.api_url,
                                                 token_env=c.token_env, verify_tls=c.verify_tls, ca_file=c.ca_file))
                return cache[0]

            self._kube_clients[key] = factory
        return self._kube_clients[key]

    def deployer(self, c: SimulatedDeployerConfig | KubernetesDeployerConfig) -> Any:
        if isinstance(c, SimulatedDeployerConfig):
            return self.fleet
        from activities.adapters.kubernetes.deployer import KubernetesDeployer, KubeSettings

        settings = KubeSettings(
            namespace=c.namespace, workload=c.workload, container=c.container,
            progress_deadline_seconds=c.progress_deadline_seconds, poll_seconds=c.poll_seconds,
            image_pull_grace_seconds=c.image_pull_grace_seconds,
        )
        return KubernetesDeployer(self._kube_factory(c), settings)

    def metrics(self, c: SimulatedMetricsConfig | PrometheusConfig | CloudWatchConfig) -> Any:
        if isinstance(c, SimulatedMetricsConfig):
            return self.fleet
        if isinstance(c, PrometheusConfig):
            from activities.adapters.prometheus import PrometheusSettings, PrometheusSource

            return PrometheusSource(PrometheusSettings(
                url=c.url, queries=dict(c.queries), token_env=c.token_env, step_seconds=c.step_seconds,
                timeout_seconds=c.timeout_seconds, max_attempts=c.max_attempts,
            ))
        from activities.adapters.cloudwatch import CloudWatchMetric, CloudWatchSettings, CloudWatchSource

        metrics = {
            name: CloudWatchMetric(namespace=m.namespace, metric_name=m.metric_name, dimensions=dict(m.dimensions),
                                   statistic=m.statistic, period_seconds=m.period_seconds, unit=m.unit)
            for name, m in c.metrics.items()
        }
        return CloudWatchSource(CloudWatchSettings(metrics=metrics, aws_region=c.aws_region,
                                                   connection=_aws_connection(self.targets.aws)))


class Unconfigured:
    """Serves stages a targets file does not cover: every call fails, non-retryable, saying how to fix it."""

    def __init__(self, source: str = "the targets file") -> None:
        self.source = source

    def _why(self, stage: StageRef) -> str:
        return (f"{stage.key} has no target in {self.source} and the file sets no `defaults`; "
                "add a target for it (docs/targets.md) — nothing was deployed")

    async def current_version(self, stage: StageRef) -> str | None:
        raise DeployError(self._why(stage), retryable=False)

    async def deploy(self, stage: StageRef, role: str, version: str, image: str | None, replicas: int) -> None:
        raise DeployError(self._why(stage), retryable=False)

    async def promote(self, stage: StageRef, version: str, image: str) -> str | None:
        raise DeployError(self._why(stage), retryable=False)

    async def rollback(self, stage: StageRef, to_version: str | None, image: str | None) -> None:
        raise DeployError(self._why(stage), retryable=False)

    async def cleanup(self, stage: StageRef) -> None:
        raise DeployError(self._why(stage), retryable=False)

    async def fetch(self, stage: StageRef, metric: Any, window: Any, baseline: Any, canary: Any) -> Any:
        raise MetricsError(self._why(stage), retryable=False)


def registry_from_targets(targets: TargetsFile, fleet: SimulatedFleet | None = None) -> AdapterRegistry:
    """The AdapterRegistry for a targets file: per region/env adapters, defaults for the rest, webhooks."""
    fleet = fleet or SimulatedFleet()
    b = _Builder(targets, fleet)
    unconfigured = Unconfigured()
    defaults = targets.defaults
    registry = AdapterRegistry(
        default_deployer=b.deployer(defaults.deployer) if defaults else unconfigured,
        default_metrics=b.metrics(defaults.metrics) if defaults else unconfigured,
    )
    routers: dict[tuple[str, str, str], Any] = {}
    for t in targets.targets:
        if t.deployer is not None:
            registry.deployers[t.key] = b.deployer(t.deployer)
        if t.metrics is not None:
            registry.metric_sources[t.key] = b.metrics(t.metrics)
        if t.traffic is not None:
            from activities.adapters.route53 import RegionTraffic, Route53Traffic, WeightedRecord

            r = t.traffic.route53
            rk = (r.zone_id, r.record_name.rstrip("."), r.record_type)
            if rk not in routers:
                routers[rk] = Route53Traffic(WeightedRecord(r.zone_id, r.record_name, r.record_type),
                                             functools.partial(_aws_connection(targets.aws).client, "route53", "us-east-1"))
            registry.traffic[t.key] = RegionTraffic(routers[rk], r.set_identifier or t.region)
    if targets.notifications.webhooks:
        from activities.adapters.webhooks import Webhook, WebhookNotifier

        registry.notifier = WebhookNotifier([
            Webhook(name=w.name, url_env=w.url_env, events=frozenset(w.events), timeout_seconds=w.timeout_seconds)
            for w in targets.notifications.webhooks
        ])
    if targets.reports is not None:
        registry.reports = report_store_from_config(targets.reports, targets.aws)
    return registry
