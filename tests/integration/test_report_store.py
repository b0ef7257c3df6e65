"""Report stores against real services: S3 on moto in server mode (object, content type, a link a browser can open)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from temporalio.testing import ActivityEnvironment

from activities.adapters.registry import AdapterRegistry, registry_from_targets, report_store_from_config
from activities.adapters.reports import ReportError, S3ReportStore, report_key
from activities.adapters.simulated import SimulatedFleet
from activities.adapters.targets import parse_targets
from activities.analysis import AnalysisActivities
from activities.models import AnalysisInput, ReportInput
from canary.config import JudgeConfig, MetricSpec
from common.types import MetricWindow, StageRef
from tests.integration.conftest import MotoServer

pytestmark = pytest.mark.integration
REGION = "eu-west-1"


def s3_targets(moto: MotoServer, bucket: str, **reports: object) -> dict:
    return {
        "aws": {"endpoint_url": moto.endpoint, "access_key_id_env": "BIFROST_TEST_S3_KEY",
                "secret_access_key_env": "BIFROST_TEST_S3_SECRET"},
        "reports": {"kind": "s3", "bucket": bucket, "aws_region": REGION, "prefix": "reports/", **reports},
    }


@pytest.fixture
def bucket(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("BIFROST_TEST_S3_KEY", "testing")
    monkeypatch.setenv("BIFROST_TEST_S3_SECRET", "testing")
    name = f"bifrost-reports-{uuid.uuid4().hex[:12]}"
    moto_server.client("s3", REGION).create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    return name


async def test_a_report_put_in_s3_is_named_by_its_object_address_and_opens_from_a_fresh_presigned_link(
        moto_server: MotoServer, bucket: str):
    targets = parse_targets(s3_targets(moto_server, bucket))
    store = registry_from_targets(targets).reports
    assert isinstance(store, S3ReportStore)
    key = report_key("rollout/checkout/2.0.0", "eu-west-1-prod-canary")
    page = "<!doctype html><title>r</title><p>verdict: pass — ü</p>"
    url = await store.put(key, page)

    head = moto_server.client("s3", REGION).head_object(Bucket=bucket, Key="reports/" + key)
    assert head["ContentType"] == "text/html; charset=utf-8" and head["ContentLength"] == len(page.encode())
    # the link a verdict, a history and chat carry: no access key id, no signature, no session token
    assert url == f"s3://{bucket}/reports/rollout_checkout_2.0.0/eu-west-1-prod-canary.html"
    assert store.url_for("rollout/checkout/2.0.0", "eu-west-1-prod-canary") == url  # named before or after: the same
    signed = store.presign(url, 600)  # only when a person asks (`bifrost report-link`)
    assert signed.startswith(f"{moto_server.endpoint}/{bucket}/reports/rollout_checkout_2.0.0/eu-west-1-prod-canary.html?")
    got = httpx.get(signed)
    assert got.status_code == 200 and got.text == page and got.headers["content-type"].startswith("text/html")
    assert httpx.get(signed.split("?")[0]).status_code == 403  # the object itself is private: only the signed link opens it
    with pytest.raises(ReportError, match="not in this store's bucket"):
        store.presign(f"s3://other-bucket/reports/{key}")
    with pytest.raises(ReportError, match="not a report of this store"):
        store.presign(f"s3://{bucket}/elsewhere/{key}")


def test_report_link_prints_a_fresh_presigned_link_only_when_asked(moto_server: MotoServer, bucket: str, tmp_path):
    import json

    from click.testing import CliRunner

    from bifrost_cli.main import cli

    moto_server.client("s3", REGION).put_object(Bucket=bucket, Key="reports/r/a.html", Body=b"<p>hello")
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(s3_targets(moto_server, bucket)))
    result = CliRunner().invoke(cli, ["report-link", f"s3://{bucket}/reports/r/a.html", "--targets", str(path)])
    assert result.exit_code == 0, result.output
    assert httpx.get(result.output.strip()).text == "<p>hello"
    result = CliRunner().invoke(cli, ["report-link", "s3://elsewhere/reports/r/a.html", "--targets", str(path)])
    assert result.exit_code != 0 and "not in this store's bucket" in result.output


async def test_render_report_stores_in_s3(moto_server: MotoServer, bucket: str):
    store = report_store_from_config(parse_targets(s3_targets(moto_server, bucket)).reports,
                                     parse_targets(s3_targets(moto_server, bucket)).aws)
    assert isinstance(store, S3ReportStore)
    acts = AnalysisActivities(AdapterRegistry.simulated(SimulatedFleet()), store)
    start = datetime(2026, 3, 1, tzinfo=UTC)
    inp = AnalysisInput(
        stage=StageRef(service="checkout", region="us-east-1", environment="test"), rollout_id="rollout/checkout/1.1.0",
        analysis_id="us-east-1-test-canary", metrics=[MetricSpec(name="latency", kind="latency")], judge=JudgeConfig(),
        window=MetricWindow(start=start, end=start + timedelta(minutes=40)), baseline_version="1.0.0", canary_version="1.1.0",
    )
    env = ActivityEnvironment()
    judged = await env.run(acts.analyze_canary, inp)
    ref = await env.run(acts.render_report, ReportInput.for_canary(inp, judged.result))
    body = moto_server.client("s3", REGION).get_object(Bucket=bucket, Key="reports/" + ref.key)["Body"].read().decode()
    assert "<img alt='Time series of latency: baseline vs canary'" in body and len(body.encode()) == ref.size_bytes
    assert ref.url == f"s3://{bucket}/reports/{ref.key}"
    assert httpx.get(store.presign(ref.url)).text == body


async def test_a_public_base_url_needs_no_credentials_to_name_a_link(moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("BIFROST_TEST_S3_KEY", raising=False)
    targets = parse_targets(s3_targets(moto_server, "some-bucket", public_base_url="https://reports.example.com/r/"))
    store = report_store_from_config(targets.reports, targets.aws)
    assert store.url_for("rollout/checkout/2.0.0", "x") == "https://reports.example.com/r/reports/rollout_checkout_2.0.0/x.html"
    with pytest.raises(ReportError, match="BIFROST_TEST_S3_KEY is not set") as err:
        await store.put("a/b.html", "<p>")  # storing does need them, and says which variable is missing
    assert err.value.retryable is False


async def test_a_missing_bucket_is_a_permanent_error_naming_it(moto_server: MotoServer, bucket: str):
    targets = parse_targets(s3_targets(moto_server, bucket + "-gone"))
    store = report_store_from_config(targets.reports, targets.aws)
    with pytest.raises(ReportError, match=f"s3://{bucket}-gone/reports/a/b.html: S3 NoSuchBucket") as err:
        await store.put("a/b.html", "<p>")
    assert err.value.retryable is False and "reports.bucket" in str(err.value)
