"""Which adapter serves which region and environment, and where reports go, built once per worker from a targets file.

The real adapters are imported only when a targets file asks for them (they pull in boto3, httpx and
kubernetes); a stage the file does not cover is served by `Unconfigured`, which refuses every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from activities.adapters.base import Deployer, DeployError, MetricsError, MetricSource, TrafficRouter
from activities.adapters.reports import LocalReportStore, ReportStore, S3ReportStore
from activities.adapters.routers.base import TrafficRouter as CanaryRouter
from activities.adapters.secrets import remember_secrets_from_env, remember_url_credentials
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.simulated_router import SimulatedCanaryRouter
from activities.adapters.simulated_traffic import ObservedDeployer, ObservedRouter, SimulatedRecordSets
from activities.adapters.targets import (
    AlbRouterConfig,
    AwsConfig,
    CloudWatchConfig,
    GatewayApiRouterConfig,
    KubernetesDeployerConfig,
    LocalReportsConfig,
    PrometheusConfig,
    ReportsConfig,
    SimulatedDeployerConfig,
    SimulatedMetricsConfig,
    Target,
    TargetsFile,
)
from canary.config import MetricSpec
from common.types import DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES, StageRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from activities.adapters.route53 import RegionTraffic
    from activities.adapters.routers.base import TrafficRouter as CanaryRouter
    from activities.adapters.webhooks import WebhookNotifier


@dataclass(frozen=True)
class TrafficTarget:
    """What an evacuation needs to know about one region/environment: its record, bounds and health metrics.

    `router_for(service)` gives the service's weighted record set; regions whose routers are the same
    object share one set."""

    region: str
    environment: str
    set_identifier: str
    router_for: Callable[[str], TrafficRouter]
    min_wait_seconds: int = 0  # configured lower bound on the wait after each step (the TTL is waited anyway)
    max_replicas: int | None = None
    health: tuple[MetricSpec, ...] = ()
    alarms: Any = None  # AlarmStates of the region's CloudWatch alarms (the region guard reads them), or None

    @property
    def key(self) -> str:
        return f"{self.region}/{self.environment}"


@dataclass
class AdapterRegistry:
    """Looks up the deployer and metric source of a stage; falls back to the defaults."""

    default_deployer: Deployer
    default_metrics: MetricSource
    deployers: dict[str, Deployer] = field(default_factory=dict)  # key: "region/env"
    metric_sources: dict[str, MetricSource] = field(default_factory=dict)
    traffic: dict[str, "RegionTraffic"] = field(default_factory=dict)  # key: "region/env"; overrides traffic_targets
    notifier: "WebhookNotifier | None" = None  # None: notifications are only logged
    reports: ReportStore | None = None  # from the targets file's `reports`; None: the worker's local folder
    traffic_targets: dict[str, TrafficTarget] = field(default_factory=dict)  # key: "region/env"
    # the targets file's policy.min_promote_hold_minutes: what a hold that promotes on timeout must last at least
    promote_hold_floor_minutes: float = DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES
    # canary traffic routers (canary.traffic): per "region/env", else the default (None: no router configured)
    canary_routers: dict[str, CanaryRouter] = field(default_factory=dict)
    default_canary_router: CanaryRouter | None = None

    def deployer(self, stage: StageRef) -> Deployer:
        return self.deployers.get(stage.key, self.default_deployer)

    def metrics(self, stage: StageRef) -> MetricSource:
        return self.metric_sources.get(stage.key, self.default_metrics)

    def router(self, stage: StageRef) -> CanaryRouter | None:
        """The router that sets the stage's canary weights, or None when its targets configure none."""
        return self.canary_routers.get(stage.key, self.default_canary_router)

    def traffic_for(self, stage: StageRef) -> "RegionTraffic | None":
        """The stage's Route 53 weighted record (for the stage's service), or None when the targets file gives none."""
        if stage.key in self.traffic:
            return self.traffic[stage.key]
        target = self.traffic_targets.get(stage.key)
        if target is None:
            return None
        from activities.adapters.route53 import RegionTraffic, Route53Traffic

        router = target.router_for(stage.service)
        if isinstance(router, ObservedRouter):
            router = router.inner
        return RegionTraffic(router, target.set_identifier) if isinstance(router, Route53Traffic) else None

    def traffic_target(self, region: str, environment: str) -> TrafficTarget | None:
        """The region's traffic configuration, or None when the targets file gives it none."""
        return self.traffic_targets.get(f"{region}/{environment}")

    @classmethod
    def simulated(cls, fleet: SimulatedFleet) -> "AdapterRegistry":
        return cls(default_deployer=fleet, default_metrics=fleet, default_canary_router=SimulatedCanaryRouter(fleet))


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

    def _kube_factory(self, c: KubernetesDeployerConfig | GatewayApiRouterConfig) -> Callable[[], "ApiClient"]:
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
                histograms={name: (h.query, h.quantile) for name, h in c.histograms.items()},
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

    async def replicas(self, stage: StageRef) -> int:
        raise DeployError(self._why(stage), retryable=False)

    async def scale(self, stage: StageRef, replicas: int) -> None:
        raise DeployError(self._why(stage), retryable=False)

    async def fetch(self, stage: StageRef, metric: Any, window: Any, baseline: Any, canary: Any) -> Any:
        raise MetricsError(self._why(stage), retryable=False)


class _TrafficBuilder:
    """Builds each region's TrafficTarget; one router per record set and service, shared by its regions."""

    def __init__(self, targets: TargetsFile, fleet: SimulatedFleet) -> None:
        self.targets = targets
        self.simulated = SimulatedRecordSets(fleet)  # kept in the fleet's state: every worker on it sees one set
        self._route53: dict[tuple[str, str, str], Any] = {}

    def route53(self, zone_id: str, record_name: str, record_type: str) -> Any:
        """The Route53Traffic of one record set (built once, with one AWS client)."""
        key = (zone_id, record_name.rstrip(".").lower(), record_type)
        if key not in self._route53:
            from activities.adapters.route53 import Route53Traffic, WeightedRecord

            self._route53[key] = Route53Traffic(
                WeightedRecord(zone_id, record_name, record_type),
                functools.partial(_aws_connection(self.targets.aws).client, "route53", "us-east-1"),
            )
        return self._route53[key]

    def target(self, t: Target) -> TrafficTarget:
        assert t.traffic is not None
        cfg = t.traffic
        min_wait = 0
        router_for: Callable[[str], TrafficRouter]
        if cfg.route53 is not None:
            r53 = cfg.route53
            min_wait = r53.ttl_seconds or 0

            def router_for(service: str) -> TrafficRouter:
                router: TrafficRouter = self.route53(r53.zone_id, r53.record_for(service), r53.record_type)
                return router
        else:
            assert cfg.simulated is not None
            self.simulated.add_region(t.environment, t.set_identifier, cfg.simulated.weight, cfg.simulated.ttl_seconds)
            env = t.environment

            def router_for(service: str) -> TrafficRouter:
                return self.simulated.record_set(service, env)

        alarms = None
        if cfg.alarms:
            from activities.adapters.cloudwatch_alarms import AlarmStates

            alarms = AlarmStates(tuple(cfg.alarms), functools.partial(
                _aws_connection(self.targets.aws).client, "cloudwatch", cfg.alarms_aws_region or t.region))
        return TrafficTarget(region=t.region, environment=t.environment, set_identifier=t.set_identifier,
                             router_for=router_for, min_wait_seconds=min_wait, max_replicas=cfg.max_replicas,
                             health=tuple(cfg.health_specs()), alarms=alarms)


class _RouterBuilder:
    """Builds a target's real canary router (gateway-api, alb); a simulated stage's router is the fleet's."""

    def __init__(self, targets: TargetsFile, kube: _Builder) -> None:
        self.targets = targets
        self.kube = kube

    def router(self, t: Target) -> "CanaryRouter | None":
        c = t.router
        if isinstance(c, GatewayApiRouterConfig):
            from activities.adapters.routers.gateway_api import GatewayApiRouter, GatewayRouteSettings

            deployer = t.deployer or (self.targets.defaults.deployer if self.targets.defaults else None)
            # no connection of its own: the cluster the target's Kubernetes deployer reaches (one shared client)
            conn = deployer if not c.own_connection and isinstance(deployer, KubernetesDeployerConfig) else c
            return GatewayApiRouter(self.kube._kube_factory(conn), GatewayRouteSettings(
                namespace=c.namespace, route=c.route, primary=c.primary, canary=c.canary, baseline=c.baseline))
        if isinstance(c, AlbRouterConfig):
            from activities.adapters.routers.alb import AlbRouter, AlbSettings

            settings = AlbSettings(service=c.service, primary=c.primary, canary=c.canary, baseline=c.baseline,
                                   rule_arn=c.rule_arn, listener_arn=c.listener_arn)
            return AlbRouter(settings, functools.partial(_aws_connection(self.targets.aws).client, "elbv2",
                                                         settings.region))
        return None


def registry_from_targets(targets: TargetsFile, fleet: SimulatedFleet | None = None) -> AdapterRegistry:
    """The AdapterRegistry for a targets file: per region/env adapters, defaults for the rest, webhooks.

    The values of the secrets the file names, and the userinfo of its URLs, are remembered for redaction from here on (see `secrets.redact`),
    so they are masked in this process's logs even before an activity reads them."""
    remember_secrets_from_env(targets.secret_env_names())
    for url in targets.urls():
        remember_url_credentials(url)  # e.g. Prometheus' http://user:password@host: echoed as base64 by a server
    fleet = fleet or SimulatedFleet()
    b = _Builder(targets, fleet)
    unconfigured = Unconfigured()
    defaults = targets.defaults
    registry = AdapterRegistry(
        default_deployer=b.deployer(defaults.deployer) if defaults else unconfigured,
        default_metrics=b.metrics(defaults.metrics) if defaults else unconfigured,
    )
    if defaults is not None and isinstance(defaults.deployer, SimulatedDeployerConfig) and defaults.deployer.replicas is not None:
        fleet.load.default_replicas = defaults.deployer.replicas
    traffic = _TrafficBuilder(targets, fleet)
    routers = _RouterBuilder(targets, b)
    for t in targets.targets:
        if t.deployer is not None:
            registry.deployers[t.key] = b.deployer(t.deployer)
            if isinstance(t.deployer, SimulatedDeployerConfig) and t.deployer.replicas is not None:
                fleet.load.configure(t.region, t.environment, t.deployer.replicas)
        if t.metrics is not None:
            registry.metric_sources[t.key] = b.metrics(t.metrics)
        if t.traffic is not None:
            registry.traffic_targets[t.key] = traffic.target(t)
        if (router := routers.router(t)) is not None:
            registry.canary_routers[t.key] = router
    _simulated_routers(registry, fleet)
    _let_the_fleet_observe(registry, fleet)
    if targets.notifications.webhooks:
        from activities.adapters.webhooks import Webhook, WebhookNotifier

        registry.notifier = WebhookNotifier([
            Webhook(name=w.name, url_env=w.url_env, events=frozenset(w.events), timeout_seconds=w.timeout_seconds)
            for w in targets.notifications.webhooks
        ], ui_url=targets.notifications.ui_url)
    if targets.reports is not None:
        registry.reports = report_store_from_config(targets.reports, targets.aws)
    registry.promote_hold_floor_minutes = targets.policy.min_promote_hold_minutes
    return registry


def _simulated_routers(registry: AdapterRegistry, fleet: SimulatedFleet) -> None:
    """A stage the simulated fleet deploys has the fleet's own canary router (the fleet honours its weights)."""
    router = SimulatedCanaryRouter(fleet)
    if registry.default_deployer is fleet and registry.default_canary_router is None:
        registry.default_canary_router = router
    for key, deployer in registry.deployers.items():
        if deployer is fleet and key not in registry.canary_routers:
            registry.canary_routers[key] = router


def _let_the_fleet_observe(registry: AdapterRegistry, fleet: SimulatedFleet) -> None:
    """Put the simulated fleet's own adapters around what it must learn from, so its samples follow the traffic.

    Where a stage's metrics are simulated, the fleet's traffic model must know that stage's replicas (when a
    real deployer runs it) and its record set's weights: the routers of those record sets and those deployers
    are wrapped in `ObservedRouter` / `ObservedDeployer`. Nothing is wrapped where every metric is real."""
    load = fleet.load

    def simulated_metrics(key: str) -> bool:
        return registry.metric_sources.get(key, registry.default_metrics) is fleet

    for key, deployer in list(registry.deployers.items()):
        if deployer is not fleet and simulated_metrics(key):
            registry.deployers[key] = ObservedDeployer(deployer, load)
    if registry.default_deployer is not fleet and registry.default_metrics is fleet:
        registry.default_deployer = ObservedDeployer(registry.default_deployer, load)
    # record sets are per service, known only when asked: every set of an environment whose metrics are simulated
    environments = {t.environment for k, t in registry.traffic_targets.items() if simulated_metrics(k)}
    observed: dict[tuple[str, int], ObservedRouter] = {}  # (service, id of the record set's router) -> its wrapper

    def observe(target: TrafficTarget) -> TrafficTarget:
        inner_for = target.router_for
        env = target.environment

        def members(service: str, inner: TrafficRouter) -> dict[str, str]:
            return {t.region: t.set_identifier for t in registry.traffic_targets.values()
                    if t.environment == env and _unwrap(t.router_for(service)) is inner}

        def router_for(service: str) -> TrafficRouter:
            inner = inner_for(service)
            key = (service, id(inner))
            if key not in observed:
                observed[key] = ObservedRouter(inner, load, service, env, lambda: members(service, inner))
            return observed[key]

        return replace(target, router_for=router_for)

    for key, target in list(registry.traffic_targets.items()):
        if target.environment in environments:
            registry.traffic_targets[key] = observe(target)


def _unwrap(router: TrafficRouter) -> TrafficRouter:
    return router.inner if isinstance(router, ObservedRouter) else router
