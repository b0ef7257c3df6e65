"""The targets file: which deployer, metric source, traffic record and webhooks serve each region/environment,
and where canary reports are stored.

Loaded from YAML and validated before a worker starts; every error names the field. Secrets appear only
as environment-variable names (`*_env`) and are read inside activities. `registry.registry_from_targets` turns
the file into the lookup the activities use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from canary.config import MetricSpec
from common.loading import load_document
from common.problems import FileProblems, joined, validation_problems
from common.text import visible, web_url
from common.types import DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES, EnvKind, stage_key

_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, Field(pattern=_ENV, description="name of an environment variable holding the secret")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # no timeout of inf seconds


class SimulatedDeployerConfig(_Model):
    """The in-memory simulated fleet (demos, tests)."""

    kind: Literal["simulated"]
    replicas: int | None = Field(
        default=None, ge=0, description="replicas the simulated primary starts with (its capacity); default: 4")


class KubernetesDeployerConfig(_Model):
    """A Kubernetes namespace reached by kubeconfig context, or by API URL plus a token from the environment."""

    kind: Literal["kubernetes"]
    context: str | None = Field(default=None, description="kubeconfig context; default: the current context")
    kubeconfig: str | None = Field(default=None, description="kubeconfig path; default: $KUBECONFIG or ~/.kube/config")
    api_url: str | None = Field(default=None, description="API server URL, instead of a kubeconfig")
    token_env: EnvName | None = Field(default=None, description="env var with a bearer token (with api_url)")
    verify_tls: bool = True
    ca_file: str | None = None
    namespace: str = Field(min_length=1, description="namespace of the primary; {service} is replaced")
    workload: str = Field(default="{service}", min_length=1, description="primary Deployment name; {service} is replaced")
    container: str | None = Field(default=None, description="container whose image changes; default: the first")
    progress_deadline_seconds: float = Field(default=600, gt=0)
    poll_seconds: float = Field(default=2.0, gt=0)
    image_pull_grace_seconds: float = Field(default=120, ge=0)

    @model_validator(mode="after")
    def _one_way_in(self) -> "KubernetesDeployerConfig":
        return _one_way_in(self)


KubeConfigT = TypeVar("KubeConfigT", "KubernetesDeployerConfig", "GatewayApiRouterConfig")


def _one_way_in(c: KubeConfigT) -> KubeConfigT:
    """A Kubernetes connection is a kubeconfig context or an API URL with a token from the environment, not both."""
    if c.api_url and (c.context or c.kubeconfig):
        raise ValueError("give either api_url (with token_env) or context/kubeconfig, not both")
    if c.token_env and not c.api_url:
        raise ValueError("token_env needs api_url; with a kubeconfig the credentials come from the context")
    if c.api_url and not c.api_url.startswith(("http://", "https://")):
        raise ValueError(f"api_url must start with https:// (or http:// for a local test server), got {c.api_url!r}")
    return c


DeployerConfig = Annotated[SimulatedDeployerConfig | KubernetesDeployerConfig, Field(discriminator="kind")]


def _only_service_placeholder(v: str) -> str:
    bad = sorted(set(re.findall(r"\{([^{}]*)\}", v)) - {"service"})
    if bad:
        raise ValueError(f"unknown placeholder(s) {', '.join('{' + b + '}' for b in bad)}; only {{service}} is allowed")
    return v


class GatewayApiRouterConfig(_Model):
    """A Gateway API HTTPRoute whose backendRefs weights are the canary's share; `{service}` in every name is replaced.

    The connection: its own (context/kubeconfig, or api_url + token_env), else the target's Kubernetes deployer's."""

    kind: Literal["gateway-api"]
    namespace: str = Field(min_length=1, description="namespace of the HTTPRoute and the three Services")
    route: str = Field(default="{service}", min_length=1, description="the HTTPRoute's name")
    primary: str = Field(default="{service}", min_length=1, description="the primary's Service")
    canary: str = Field(default="{service}-canary", min_length=1, description="the canary's Service")
    baseline: str = Field(default="{service}-baseline", min_length=1, description="the baseline's Service")
    context: str | None = None
    kubeconfig: str | None = None
    api_url: str | None = None
    token_env: EnvName | None = None
    verify_tls: bool = True
    ca_file: str | None = None

    _names = field_validator("namespace", "route", "primary", "canary", "baseline")(_only_service_placeholder)

    @model_validator(mode="after")
    def _arms(self) -> "GatewayApiRouterConfig":
        _one_way_in(self)
        if len({self.primary, self.canary, self.baseline}) != 3:
            raise ValueError(f"primary, canary and baseline must be three different Services (got {self.primary}, "
                             f"{self.canary}, {self.baseline})")
        return self

    @property
    def own_connection(self) -> bool:
        return any((self.context, self.kubeconfig, self.api_url))


_ELB_ARN = r"^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:\d{12}:"


class AlbRouterConfig(_Model):
    """An Application Load Balancer listener rule (or a listener's default action) whose forward action's target
    group weights are the canary's share; reached with the file's `aws` connection in the ARN's region."""

    kind: Literal["alb"]
    service: str = Field(min_length=1, description="the service whose traffic the rule carries (ARNs name no service)")
    rule_arn: str | None = Field(default=None, pattern=_ELB_ARN + "listener-rule/", description="a listener rule")
    listener_arn: str | None = Field(default=None, pattern=_ELB_ARN + "listener/", description="or a listener's default action")
    primary: str = Field(pattern=_ELB_ARN + "targetgroup/", description="the primary's target group ARN")
    canary: str = Field(pattern=_ELB_ARN + "targetgroup/", description="the canary's target group ARN")
    baseline: str = Field(pattern=_ELB_ARN + "targetgroup/", description="the baseline's target group ARN")

    @model_validator(mode="after")
    def _one_place(self) -> "AlbRouterConfig":
        if (self.rule_arn is None) == (self.listener_arn is None):
            raise ValueError("give exactly one of rule_arn (a listener rule) or listener_arn (its default action)")
        if len({self.primary, self.canary, self.baseline}) != 3:
            raise ValueError("primary, canary and baseline must be three different target groups")
        return self


class SimulatedRouterConfig(_Model):
    """The simulated fleet's router: each arm's samples follow its share (demos, tests)."""

    kind: Literal["simulated"]


RouterConfig = Annotated[GatewayApiRouterConfig | AlbRouterConfig | SimulatedRouterConfig, Field(discriminator="kind")]


class SimulatedMetricsConfig(_Model):
    kind: Literal["simulated"]


class PrometheusConfig(_Model):
    """PromQL per metric; placeholders {service} {version} {region} {environment} {role} become label values."""

    kind: Literal["prometheus"]
    url: str = Field(pattern=r"^https?://", description="server root, e.g. http://prometheus:9090")
    token_env: EnvName | None = None
    queries: dict[str, str] = Field(min_length=1, description="metric name -> PromQL template")
    histograms: dict[str, PrometheusHistogramConfig] = Field(
        default_factory=dict, description="latency metric name -> its bucket query (the region guard judges on them)")
    step_seconds: int | None = Field(default=None, ge=1, description="default: the canary interval")
    timeout_seconds: float = Field(default=10, gt=0)
    max_attempts: int = Field(default=3, ge=1)

    @field_validator("queries")
    @classmethod
    def _placeholders(cls, v: dict[str, str]) -> dict[str, str]:
        from activities.adapters.prometheus import PLACEHOLDERS, unknown_placeholders

        for name, q in v.items():
            bad = unknown_placeholders(q)
            if bad:
                raise ValueError(f"{name}: unknown placeholder(s) {', '.join('{' + b + '}' for b in bad)}; "
                                 f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
            if "{version}" not in q:
                raise ValueError(f"{name}: the query must use {{version}} to tell baseline and canary apart")
        return v

    @model_validator(mode="after")
    def _histograms_have_queries(self) -> "PrometheusConfig":
        for name in self.histograms:
            if name not in self.queries:
                raise ValueError(f"histograms.{name}: also needs a plain query under queries.{name} (canaries and the "
                                 "evacuation's health checks read it)")
        return self


class PrometheusHistogramConfig(_Model):
    """A latency metric's buckets: one series per `le` with each step's requests, for the region guard."""

    query: str = Field(min_length=1, description="e.g. sum by (le) (increase(..._bucket{...}[{step}])); {step}: the "
                                                 "step, so each request counts in one step only")
    quantile: float = Field(default=0.99, gt=0.5, lt=1, description="the quantile the metric stands for")

    @field_validator("query")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        from activities.adapters.prometheus import PLACEHOLDERS, unknown_placeholders

        bad = unknown_placeholders(v.replace("{step}", ""))
        if bad:
            raise ValueError(f"unknown placeholder(s) {', '.join('{' + b + '}' for b in bad)}; "
                             f"allowed: {', '.join('{' + p + '}' for p in (*PLACEHOLDERS, 'step'))}")
        if "{version}" not in v:
            raise ValueError("the query must use {version} to read the region's serving version")
        if "le" not in v:
            raise ValueError("the query must keep the `le` label, e.g. sum by (le) (...)")
        return v


class CloudWatchMetricConfig(_Model):
    namespace: str = Field(min_length=1)
    metric_name: str = Field(min_length=1)
    dimensions: dict[str, str] = Field(default_factory=dict, description="values may use the placeholders")
    statistic: str = Field(default="Average", description="Average, Sum, Minimum, Maximum, SampleCount or pNN")
    period_seconds: int | None = Field(default=None, ge=1)
    unit: str | None = None

    @field_validator("period_seconds")
    @classmethod
    def _period(cls, v: int | None) -> int | None:
        from activities.adapters.cloudwatch import valid_period

        if v is not None and not valid_period(v):
            raise ValueError(f"{v}: CloudWatch periods are 1, 5, 10, 30 or a multiple of 60")
        return v


class CloudWatchConfig(_Model):
    kind: Literal["cloudwatch"]
    aws_region: str | None = Field(default=None, description="default: the target's region")
    metrics: dict[str, CloudWatchMetricConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _version_dimension(self) -> "CloudWatchConfig":
        for name, m in self.metrics.items():
            if not any("{version}" in v for v in m.dimensions.values()):
                raise ValueError(f"metrics.{name}: some dimension must use {{version}} to tell baseline and canary apart")
        return self


MetricsConfig = Annotated[SimulatedMetricsConfig | PrometheusConfig | CloudWatchConfig, Field(discriminator="kind")]


class Route53Config(_Model):
    """The service's weighted record set; this region's record is the one with `set_identifier`."""

    zone_id: str = Field(min_length=1, description="hosted zone id, e.g. Z0123456789ABCDEFGHIJ")
    record_name: str = Field(min_length=1, description="e.g. api.example.com or {service}.example.com")
    record_type: Literal["A", "AAAA", "CNAME"] = "CNAME"
    set_identifier: str | None = Field(default=None, description="default: the region name")
    ttl_seconds: int | None = Field(
        default=None, ge=0, le=172800,
        description="wait at least this long after each traffic step; the record's own TTL is waited for anyway",
    )

    @field_validator("record_name")
    @classmethod
    def _record_placeholders(cls, v: str) -> str:
        bad = sorted(set(re.findall(r"\{([^{}]*)\}", v)) - {"service"})
        if bad:
            raise ValueError(f"unknown placeholder(s) {', '.join('{' + b + '}' for b in bad)}; only {{service}} is allowed")
        return v

    def record_for(self, service: str) -> str:
        """The record name for one service (`{service}` replaced)."""
        return self.record_name.replace("{service}", service)


class SimulatedRecordConfig(_Model):
    """This region's record in a weighted record set kept in the worker's memory (demos, tests; no DNS)."""

    weight: int = Field(default=100, ge=0, le=255, description="the record's weight when the worker starts")
    ttl_seconds: int = Field(default=60, ge=0, le=172800, description="the simulated record's TTL")


HEALTH_DOC = "docs/traffic.md#health-checks"


def health_spec(entry: "str | MetricSpec") -> MetricSpec:
    """A health metric as the soak monitor wants it; a bare name gets its kind and tolerance from the name."""
    if isinstance(entry, MetricSpec):
        return entry
    lowered = entry.lower()
    if "error" in lowered or "5xx" in lowered:
        return MetricSpec(name=entry, kind="error_rate", direction="increase", critical=True, allowed_increase=1.5)
    if "latency" in lowered or "duration" in lowered:
        return MetricSpec(name=entry, kind="latency", direction="increase", allowed_increase=1.2)
    return MetricSpec(name=entry, kind="other", direction="increase", allowed_increase=1.2)


DEFAULT_HEALTH = ["latency_p99", "error_rate"]


class TrafficConfig(_Model):
    """How traffic reaches this region (one weighted record per region), and what an evacuation may do here."""

    route53: Route53Config | None = Field(default=None, description="the region's record in a Route 53 weighted set")
    simulated: SimulatedRecordConfig | None = Field(default=None, description="or a simulated record (no DNS)")
    max_replicas: int | None = Field(
        default=None, ge=1, description="upper bound when pre-warming this region's primary; default: no bound")
    health: list[str | MetricSpec] = Field(
        default_factory=lambda: list[str | MetricSpec](DEFAULT_HEALTH), min_length=1,
        description="metrics checked after each traffic step; each must exist in the target's metric source",
    )
    alarms: list[str] = Field(
        default_factory=list, max_length=20,
        description="CloudWatch alarm names (may use {service}): one in ALARM makes the region unhealthy to the "
                    "region guard at that look; read with the file's `aws` connection in `alarms_aws_region`",
    )
    alarms_aws_region: str | None = Field(default=None, description="default: the target's region")

    @model_validator(mode="after")
    def _one_record(self) -> "TrafficConfig":
        if (self.route53 is None) == (self.simulated is None):
            raise ValueError("give exactly one of route53 (a Route 53 weighted record) or simulated (in-memory)")
        for entry in self.health:
            if isinstance(entry, str):
                MetricSpec(name=entry)  # the same name rules as a request's metrics
        names = [health_spec(e).name for e in self.health]
        if len(set(names)) != len(names):
            raise ValueError(f"health: each metric may appear once; got {names}")
        return self

    def health_specs(self) -> list[MetricSpec]:
        return [health_spec(e) for e in self.health]

    @property
    def record_key(self) -> tuple[str, ...]:
        """Which record set this record belongs to: regions with the same key share one weighted set."""
        if self.route53 is not None:
            r = self.route53
            return ("route53", r.zone_id, r.record_name.rstrip(".").lower(), r.record_type)
        return ("simulated",)


class AwsConfig(_Model):
    """How the worker reaches AWS; with no credentials named, boto3's default chain (role, profile, env) is used."""

    endpoint_url: str | None = Field(default=None, description="e.g. a moto server or a VPC endpoint")
    profile: str | None = None
    access_key_id_env: EnvName | None = None
    secret_access_key_env: EnvName | None = None
    session_token_env: EnvName | None = None
    timeout_seconds: float = Field(default=10, gt=0)
    max_attempts: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _pairs(self) -> "AwsConfig":
        if bool(self.access_key_id_env) != bool(self.secret_access_key_env):
            raise ValueError("give both access_key_id_env and secret_access_key_env, or neither")
        return self


class LocalReportsConfig(_Model):
    """Reports in a folder on the worker's disk (the default); `bifrost worker --reports-port` serves it over HTTP."""

    kind: Literal["local"]
    dir: str = Field(default=".bifrost/reports", min_length=1, description="folder; `worker --reports DIR` overrides it")
    public_base_url: str | None = Field(
        default=None, pattern=r"^https?://",
        description="URL the folder is served at (e.g. by `worker --reports-port` behind a load balancer); "
                    "default: http://127.0.0.1:PORT with --reports-port, else file:// URLs",
    )


class S3ReportsConfig(_Model):
    """Reports in an S3 bucket, reached with the `aws` section's endpoint and credentials."""

    kind: Literal["s3"]
    bucket: str = Field(description="an existing bucket's name")
    aws_region: str = Field(min_length=1, description="the bucket's region, e.g. eu-west-1")
    prefix: str = Field(default="bifrost-reports/", description="key prefix inside the bucket")
    public_base_url: str | None = Field(
        default=None, pattern=r"^https?://",
        description="URL the bucket (or prefix's CDN) is published at; default: presigned GET URLs",
    )
    presign_expires_seconds: int = Field(
        default=7 * 24 * 3600, ge=60, le=7 * 24 * 3600,
        description="how long a presigned link works (SigV4 allows at most 7 days)",
    )


    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", v):
            raise ValueError(f"{v!r} is not an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens")
        return v


ReportsConfig = Annotated[LocalReportsConfig | S3ReportsConfig, Field(discriminator="kind")]


class Target(_Model):
    """One region and environment."""

    region: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    environment: EnvKind
    deployer: DeployerConfig | None = Field(default=None, description="default: defaults.deployer")
    metrics: MetricsConfig | None = Field(default=None, description="default: defaults.metrics")
    traffic: TrafficConfig | None = None
    router: RouterConfig | None = Field(
        default=None, description="the canary traffic router for weighted canary steps (docs/targets.md#canary-routers)")

    @property
    def key(self) -> str:
        return stage_key(self.region, self.environment)

    @property
    def set_identifier(self) -> str:
        """This region's set identifier in its weighted record set (the region name unless configured)."""
        r53 = self.traffic.route53 if self.traffic is not None else None
        return (r53.set_identifier if r53 is not None else None) or self.region


def missing_health_metrics(health: list[MetricSpec], metrics: "MetricsConfig") -> tuple[list[str], list[str]]:
    """(health metric names the metric source cannot answer, the names it has); a simulated source has them all."""
    if isinstance(metrics, SimulatedMetricsConfig):
        return [], []
    known = sorted(metrics.queries) if isinstance(metrics, PrometheusConfig) else sorted(metrics.metrics)
    return [m.name for m in health if m.name not in known], known


class Defaults(_Model):
    deployer: DeployerConfig = Field(default_factory=lambda: SimulatedDeployerConfig(kind="simulated"))
    metrics: MetricsConfig = Field(default_factory=lambda: SimulatedMetricsConfig(kind="simulated"))


class WebhookConfig(_Model):
    name: str = Field(min_length=1)
    url_env: EnvName = Field(description="env var holding the webhook URL (it contains the key)")
    events: list[str] = Field(default_factory=list, description="empty: every event")
    timeout_seconds: float = Field(default=5, gt=0)


class Notifications(_Model):
    webhooks: list[WebhookConfig] = Field(default_factory=list)
    ui_url: str | None = Field(default=None, description="the Temporal Web UI's base URL (e.g. https://temporal.example.com): "
                                                         "every message links to its rollout's page there")

    @field_validator("ui_url")
    @classmethod
    def _web_url(cls, v: str | None) -> str | None:
        if v is not None and web_url(v) is None:
            raise ValueError(f"must be an http:// or https:// URL without spaces or quotes (got {visible(v)[:80]!r})")
        return v


class Policy(_Model):
    """Safety floors the platform sets on every request its workers run; a request may be stricter, never looser."""

    min_promote_hold_minutes: float = Field(
        default=DEFAULT_PROMOTE_HOLD_FLOOR_MINUTES, ge=0, le=14 * 24 * 60,
        description="the shortest hold.timeout_minutes a request may give with hold.on_timeout: promote (a canary "
                    "held on failure is promoted when the hold times out); 0: no floor")


class TargetsFile(_Model):
    """Where each region/environment's deployer, metrics, traffic and notifications are."""

    version: Literal[1] = 1
    aws: AwsConfig = Field(default_factory=AwsConfig)
    defaults: Defaults | None = Field(
        default=None, description="adapters for stages not listed; omitted: such stages are refused, never simulated"
    )
    targets: list[Target] = Field(default_factory=list)
    notifications: Notifications = Field(default_factory=Notifications)
    reports: ReportsConfig | None = Field(default=None, description="where canary reports go; default: local folder")
    policy: Policy = Field(default_factory=Policy, description="safety floors on requests (docs/targets.md#policy)")

    @model_validator(mode="after")
    def _unique(self) -> "TargetsFile":
        keys = [t.key for t in self.targets]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"targets: each region/environment may appear once; repeated: {', '.join(dupes)}")
        names = [w.name for w in self.notifications.webhooks]
        if len(set(names)) != len(names):
            raise ValueError("notifications.webhooks: names must be unique")
        problems = self._traffic_problems()
        if problems:
            raise ValueError(joined(problems))
        return self

    def _traffic_problems(self) -> list[str]:
        """Health metrics the metric source lacks, and set identifiers used twice in one record set."""
        problems: list[str] = []
        seen: dict[tuple[str, ...], dict[str, str]] = {}
        for i, t in enumerate(self.targets):
            if t.traffic is None:
                continue
            where = f"targets.{i}.traffic"
            metrics = t.metrics or (self.defaults.metrics if self.defaults else None)
            if metrics is None:
                problems.append(f"{where}.health: {t.key} has no metric source (no `metrics` and no `defaults`), "
                                "so its health cannot be checked during an evacuation; add one")
            else:
                missing, known = missing_health_metrics(t.traffic.health_specs(), metrics)
                if missing:
                    problems.append(f"{where}.health: {', '.join(missing)} not in the metric source of {t.key} "
                                    f"(it has: {', '.join(known) or 'nothing'}); add them there or list health "
                                    f"metrics it has (see {HEALTH_DOC})")
            ids = seen.setdefault((t.environment, *t.traffic.record_key), {})
            if t.set_identifier in ids:
                problems.append(f"{where}: set identifier {t.set_identifier!r} of {t.key} is already used by "
                                f"{ids[t.set_identifier]} in the same record set; give each region its own")
            ids[t.set_identifier] = t.key
        return problems

    def target(self, key: str) -> Target | None:
        return next((t for t in self.targets if t.key == key), None)

    def urls(self) -> set[str]:
        """Every URL written in the file (any string with `://`, at any depth), e.g. to remember their userinfo."""
        return {v for _, v in _strings(self.model_dump()) if "://" in v}

    def secret_env_names(self) -> set[str]:
        """Every environment variable the file names as holding a secret (every `*_env` field, at any depth)."""
        return {v for k, v in _strings(self.model_dump()) if k.endswith("_env")}


class TargetsError(FileProblems):
    """A targets file that cannot be used, one line per problem naming the field."""

    what = "targets file"


def parse_targets(data: object, source: str = "<targets>") -> TargetsFile:
    """Validate a decoded targets file; raise TargetsError listing every problem by field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TargetsError(source, [f"(top level): expected a mapping, got {type(data).__name__}"])
    try:
        return TargetsFile.model_validate(data)
    except ValidationError as err:
        raise TargetsError(source, validation_problems(err, "docs/targets.md")) from None


def load_targets(path: str | Path) -> TargetsFile:
    """Read a YAML targets file (JSON if it ends in .json), within the loader's limits, and validate it."""
    return parse_targets(load_document(path, TargetsError), str(path))


def _strings(node: object, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a dumped model, at any depth, with the key it is under ('' in a list or at the top)."""
    if isinstance(node, str):
        yield key, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
