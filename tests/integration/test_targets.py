"""The targets file: the example validates, errors name the field, and the registry picks adapters per region/env."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.adapters.cloudwatch import CloudWatchSource
from activities.adapters.kubernetes.deployer import KubernetesDeployer
from activities.adapters.prometheus import PrometheusSource
from activities.adapters.registry import AdapterRegistry, registry_from_targets
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.targets import TargetsError, load_targets, parse_targets
from common.types import StageRef

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "targets.yaml"


def stage(region: str, env: str) -> StageRef:
    return StageRef(service="checkout", region=region, environment=env)  # type: ignore[arg-type]


def test_the_example_selects_real_adapters_per_region(monkeypatch: pytest.MonkeyPatch):
    for name in ("BIFROST_KUBE_TOKEN_EUW1", "BIFROST_SLACK_WEBHOOK_URL", "BIFROST_ONCALL_WEBHOOK_URL"):
        monkeypatch.delenv(name, raising=False)  # building never reads secrets; activities do, when they run
    fleet = SimulatedFleet()
    reg = registry_from_targets(load_targets(EXAMPLE), fleet)

    use1_test, use1_prod, euw1 = reg.deployer(stage("us-east-1", "test")), reg.deployer(stage("us-east-1", "prod")), \
        reg.deployer(stage("eu-west-1", "prod"))
    assert all(isinstance(d, KubernetesDeployer) for d in (use1_test, use1_prod, euw1))
    assert use1_test.settings.namespace == "{service}-test" and use1_prod.settings.container == "app"
    assert reg.deployer(stage("ap-south-1", "prod")) is fleet and reg.metrics(stage("ap-south-1", "prod")) is fleet
    assert isinstance(reg.metrics(stage("us-east-1", "test")), PrometheusSource)
    assert isinstance(reg.metrics(stage("eu-west-1", "prod")), CloudWatchSource)

    use1, euw1t = reg.traffic_for(stage("us-east-1", "prod")), reg.traffic_for(stage("eu-west-1", "prod"))
    assert use1 is not None and euw1t is not None and use1.router is euw1t.router  # one weighted record set
    assert (use1.set_identifier, euw1t.set_identifier) == ("us-east-1", "eu-west-1")
    assert reg.traffic_for(stage("us-east-1", "test")) is None
    assert reg.notifier is not None and [w.name for w in reg.notifier.webhooks] == ["releases", "oncall", "approvers"]
    assert reg.notifier.webhooks[1].wants("rollout_failed") and not reg.notifier.webhooks[1].wants("stage_started")
    approvers = reg.notifier.webhooks[2]  # `held` stands for every hold: approvals, windows, pauses, the lock queue
    assert approvers.wants("approval_pending", hold="approval") and not approvers.wants("rollout_failed")


async def test_stages_a_file_does_not_cover_are_refused_not_simulated():
    from activities.adapters.base import DeployError
    from activities.adapters.registry import Unconfigured

    reg = registry_from_targets(parse_targets(None))
    assert isinstance(reg.default_deployer, Unconfigured) and reg.default_deployer is reg.default_metrics
    with pytest.raises(DeployError, match="us-east-1/prod has no target .* nothing was deployed") as info:
        await reg.deployer(stage("us-east-1", "prod")).current_version(stage("us-east-1", "prod"))
    assert info.value.retryable is False
    assert reg.notifier is None and reg.traffic == {}


def test_explicit_defaults_may_choose_the_simulated_fleet():
    reg = registry_from_targets(parse_targets({"defaults": {"deployer": {"kind": "simulated"}, "metrics": {"kind": "simulated"}}}))
    assert isinstance(reg.default_deployer, SimulatedFleet) and reg.default_deployer is reg.default_metrics
    sim = AdapterRegistry.simulated(SimulatedFleet())  # the existing constructor still works
    assert sim.notifier is None and sim.traffic_for(stage("us-east-1", "prod")) is None


@pytest.mark.parametrize("data, expected", [
    ({"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {"kind": "kubernetes"}}]},
     "targets.0.deployer.kubernetes.namespace: required field is missing"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {"kind": "nomad"}}]},
     "targets.0.deployer"),
    ({"targets": [{"region": "us-east-1", "environment": "staging"}]}, "targets.0.environment"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {
        "kind": "kubernetes", "namespace": "x", "context": "c", "api_url": "https://k"}}]}, "not both"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {
        "kind": "kubernetes", "namespace": "x", "token_env": "TOKEN"}}]}, "token_env needs api_url"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "deployer": {
        "kind": "kubernetes", "namespace": "x", "api_url": "https://k", "token_env": "my-token value"}}]},
     "targets.0.deployer.kubernetes.token_env"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "metrics": {
        "kind": "prometheus", "url": "http://p:9090", "queries": {"lat": 'up{version="{verison}"}'}}}]},
     "unknown placeholder(s) {verison}"),
    ({"targets": [{"region": "us-east-1", "environment": "prod", "metrics": {
        "kind": "prometheus", "url": "http://p:9090", "queries": {"lat": "up"}}}]}, "must use {version}"),
    ({"targets": [{"region": "eu-west-1", "environment": "prod", "metrics": {
        "kind": "cloudwatch", "metrics": {"lat": {"namespace": "N", "metric_name": "L", "period_seconds": 45,
                                                   "dimensions": {"V": "{version}"}}}}}]},
     "CloudWatch periods are 1, 5, 10, 30 or a multiple of 60"),
    ({"targets": [{"region": "us-east-1", "environment": "prod"}, {"region": "us-east-1", "environment": "prod"}]},
     "repeated: us-east-1/prod"),
    ({"notifications": {"webhooks": [{"name": "x", "url": "https://hooks.slack.com/services/T/B/key"}]}},
     "notifications.webhooks.0.url: unknown field"),
    ({"aws": {"access_key_id_env": "K"}}, "give both access_key_id_env and secret_access_key_env"),
    ({"reports": {"kind": "gcs"}}, "reports: Input tag 'gcs' found using 'kind' does not match any of the expected tags"),
    ({"reports": {"kind": "s3", "aws_region": "eu-west-1"}}, "reports.s3.bucket: required field is missing"),
    ({"reports": {"kind": "s3", "bucket": "Reports_Bucket", "aws_region": "eu-west-1"}},
     "reports.s3.bucket: 'Reports_Bucket' is not an S3 bucket name: 3-63 lowercase"),
    ({"reports": {"kind": "s3", "bucket": "reports"}}, "reports.s3.aws_region: required field is missing"),
    ({"reports": {"kind": "s3", "bucket": "reports", "aws_region": "eu-west-1", "presign_expires_seconds": 30 * 86400}},
     "reports.s3.presign_expires_seconds"),
    ({"reports": {"kind": "s3", "bucket": "reports", "aws_region": "eu-west-1", "public_base_url": "reports.example.com"}},
     "reports.s3.public_base_url"),
    ({"reports": {"kind": "local", "directory": "/srv/reports"}}, "reports.local.directory: unknown field"),
    ({"reports": {"kind": "local", "dir": ""}}, "reports.local.dir"),
])
def test_errors_name_the_field(data: dict, expected: str):
    with pytest.raises(TargetsError) as err:
        parse_targets(data, "targets.yaml")
    assert expected in str(err.value), str(err.value)
    assert str(err.value).startswith("invalid targets file targets.yaml:")


def test_unreadable_and_invalid_yaml_files(tmp_path: Path):
    with pytest.raises(TargetsError, match="cannot read file"):
        load_targets(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: [\n")
    with pytest.raises(TargetsError, match="not valid YAML"):
        load_targets(bad)


def test_the_reports_section_selects_the_store(tmp_path: Path):
    from activities.adapters.reports import LocalReportStore, S3ReportStore

    assert registry_from_targets(parse_targets(None)).reports is None  # the worker's folder then
    local = registry_from_targets(parse_targets({"reports": {"kind": "local", "dir": str(tmp_path / "r")}})).reports
    assert isinstance(local, LocalReportStore) and local.root == tmp_path / "r"
    assert local.url_for("rollout/a/1", "b") == (tmp_path / "r" / "rollout_a_1" / "b.html").as_uri()
    s3 = registry_from_targets(parse_targets({"reports": {"kind": "s3", "bucket": "my-reports", "aws_region": "eu-west-1",
                                                          "prefix": "/bifrost/", "public_base_url": "https://r.example/"}})).reports
    assert isinstance(s3, S3ReportStore) and (s3.bucket, s3.prefix) == ("my-reports", "bifrost/")
    assert s3.url_for("rollout/a/1", "b") == "https://r.example/bifrost/rollout_a_1/b.html"
