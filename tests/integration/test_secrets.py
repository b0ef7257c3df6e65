"""Planted secrets on every path, and none of them anywhere a person or Temporal can read (issue #17 item 4).

Two rollouts on the real Temporal dev server with real adapters: a good one reading Prometheus with basic
auth in its URL and a bearer token, posting to a webhook whose URL carries keys in its path and query, and
storing reports in S3 (moto) with a session token; and one whose Kubernetes API echoes the refused bearer
token in its 401 body. Every history (raw events, exported with the client), every log record, every
report stored, every webhook payload and the CLI's `status` output are searched for each secret.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from temporalio.client import Client

from activities.adapters.registry import registry_from_targets
from activities.adapters.targets import load_targets
from bifrost_cli import ops
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.conftest import BASELINE, GOOD, SERVICE, Front, MotoServer, PrometheusServer, Receiver
from tests.integration.promdata import QUERIES
from tests.integration.test_e2e_rollout import histories_bytes
from worker import logs
from worker.build import build_worker
from workflows.request import RolloutRequest, parse_request
from workflows.rollout.workflow import RolloutWorkflow

pytestmark = pytest.mark.integration

IMAGE = "registry.example.com/checkout:{}"
NAMESPACES = {"test": "checkout-sec-test", "prod": "checkout-sec-prod"}
REGION = "eu-west-1"
TASK_QUEUE = f"secrets-{uuid.uuid4().hex}"


def planted(kind: str) -> str:
    return f"{kind}{uuid.uuid4().hex}"


@pytest.fixture
def worker_logging(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The worker's logging (redaction of every record, HTTP clients quiet) with every INFO record captured."""
    factory = logging.getLogRecordFactory()
    levels = {name: logging.getLogger(name).level for name in logs.CHATTY_LOGGERS}
    logs.install_redaction()
    logs.quiet_chatty_loggers()
    caplog.set_level(logging.INFO)
    try:
        yield caplog
    finally:
        logging.setLogRecordFactory(factory)
        logs._installed = False
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def rendered_logs(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as the worker's JSON formatter prints it (tracebacks included)."""
    fmt = logs.JsonFormatter()
    return "\n".join(fmt.format(r) for r in caplog.records)


def request(version: str) -> RolloutRequest:
    return parse_request({
        "service": SERVICE, "version": version, "artifact": IMAGE.format(version), "requested_by": "sec-tester",
        "regions": [{"name": "us-east-1", "traffic_share": 1.0}],
        "canary": {"metrics": [
            {"name": "latency_p99", "kind": "latency", "direction": "increase", "allowed_increase": 1.2},
            {"name": "error_rate", "kind": "error_rate", "direction": "increase", "critical": True, "allowed_increase": 1.5},
        ], "analysis_minutes": 30, "interval_seconds": 60, "judge": {"min_samples": 20}},
        "soak": {"test_hours": 0, "prod_hours": 0},
    })


def write_targets(tmp_path: Path, kube: FakeKubeApi, prom_url: str, moto: MotoServer, bucket: str) -> Path:
    kube_common = {"kind": "kubernetes", "api_url": kube.url, "token_env": "SEC_KUBE_TOKEN", "poll_seconds": 0.05,
                   "progress_deadline_seconds": 20}
    prom = {"kind": "prometheus", "url": prom_url, "token_env": "SEC_PROM_TOKEN", "queries": QUERIES}
    doc = {
        "aws": {"endpoint_url": moto.endpoint, "access_key_id_env": "SEC_AWS_KEY", "secret_access_key_env": "SEC_AWS_SECRET",
                "session_token_env": "SEC_AWS_SESSION"},
        "targets": [{"region": "us-east-1", "environment": env, "metrics": prom,
                     "deployer": {**kube_common, "namespace": ns}} for env, ns in NAMESPACES.items()],
        "notifications": {"webhooks": [{"name": "releases", "url_env": "SEC_WEBHOOK_URL"}]},
        "reports": {"kind": "s3", "bucket": bucket, "aws_region": REGION, "prefix": "reports/"},
    }
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


async def cli_status(client: Client, rollout_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """What `bifrost status ID` and `bifrost status ID --json` print."""
    async def connect() -> Client:
        return client

    monkeypatch.setattr(ops, "connect", connect)
    out = io.StringIO()
    console = Console(file=out, width=400, markup=False, emoji=False, highlight=False)
    await ops.show_status(rollout_id, as_json=False, console=console)
    await ops.show_status(rollout_id, as_json=True, console=console)
    return out.getvalue()


async def test_no_planted_secret_reaches_a_history_log_report_webhook_or_cli_output(
        ts_env, tmp_path: Path, prometheus: PrometheusServer, moto_server: MotoServer, webhook_receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch, worker_logging: pytest.LogCaptureFixture):
    kube_token, wrong_kube_token = planted("kube-token-"), planted("kube-token-echoed-")
    prom_token, prom_password = planted("prom-token-"), planted("prom-pass-")
    hook_path_key, hook_query_key = planted("B0"), planted("hook-key-")
    aws_key, aws_secret, aws_session = "AKIA" + uuid.uuid4().hex[:16].upper(), planted("aws-secret-"), planted("aws-session-")
    secrets = [kube_token, wrong_kube_token, prom_token, prom_password, hook_path_key, hook_query_key,
               aws_key, aws_secret, aws_session]
    monkeypatch.setenv("SEC_KUBE_TOKEN", kube_token)
    monkeypatch.setenv("SEC_PROM_TOKEN", prom_token)
    monkeypatch.setenv("SEC_WEBHOOK_URL", f"{webhook_receiver.url}/services/T0/{hook_path_key}?key={hook_query_key}")
    monkeypatch.setenv("SEC_AWS_KEY", aws_key)
    monkeypatch.setenv("SEC_AWS_SECRET", aws_secret)
    monkeypatch.setenv("SEC_AWS_SESSION", aws_session)
    bucket = f"bifrost-sec-{uuid.uuid4().hex[:12]}"
    s3 = moto_server.client("s3", REGION)
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})

    front = Front(prometheus.url)  # records the headers Prometheus receives
    prom_url = front.url.replace("http://", f"http://promuser:{prom_password}@")
    outputs: list[str] = []
    blobs: list[bytes] = []
    try:
        with FakeKubeApi(tick_seconds=0.02, token=kube_token, echo_auth_in_401=True) as kube:
            for ns in NAMESPACES.values():
                kube.seed_primary(ns, SERVICE, IMAGE.format(BASELINE), replicas=2)
            registry = registry_from_targets(load_targets(write_targets(tmp_path, kube, prom_url, moto_server, bucket)))
            async with build_worker(ts_env.client, registry, task_queue=TASK_QUEUE):
                # 1: a good rollout on every credentialed path: kube token, Prometheus basic auth + bearer, webhook, S3
                req = request(GOOD)
                handle = await ts_env.client.start_workflow(
                    RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE)
                good = await ops.outcome(handle)
                assert good.status == "succeeded", good.reason
                raw, _ = await histories_bytes(ts_env.client, handle, TASK_QUEUE)
                blobs.append(raw)
                outputs.append(await cli_status(ts_env.client, handle.id, monkeypatch))

                # 2: the Kubernetes API refuses the token and quotes it back in its 401 body (a second worker: the
                # first keeps its API client, made with the good token)
                monkeypatch.setenv("SEC_KUBE_TOKEN", wrong_kube_token)
                registry = registry_from_targets(load_targets(write_targets(tmp_path, kube, prom_url, moto_server, bucket)))
                async with build_worker(ts_env.client, registry, task_queue=TASK_QUEUE + "-b"):
                    req = request("1.4.0")
                    handle = await ts_env.client.start_workflow(
                        RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE + "-b")
                    bad = await ops.outcome(handle)
                    raw, _ = await histories_bytes(ts_env.client, handle, TASK_QUEUE + "-b")
                    blobs.append(raw)
                    outputs.append(await cli_status(ts_env.client, handle.id, monkeypatch))
                raw, _ = await histories_bytes(ts_env.client, handle, TASK_QUEUE)  # the service lock lives there
                blobs.append(raw)
            echoed = [r for r in kube.requests if r.authorization == f"Bearer {wrong_kube_token}"]
    finally:
        front.close()

    # positive controls: every secret was used, and the failure carries the server's words
    assert echoed, "the wrong token never reached the API server"
    basic = "Basic " + base64.b64encode(f"promuser:{prom_password}".encode()).decode()
    assert front.seen and all(h.get("Authorization") == basic for h in front.seen)  # userinfo wins over token_env
    assert bad.status in ("failed", "rolled_back") and "401 Unauthorized" in (bad.reason or ""), bad.reason
    assert "rejected Authorization: ***" in bad.reason  # the server's words stay, the token goes
    posts = json.dumps([body for _, body in webhook_receiver.posts])  # the path is the URL itself, which holds the key
    assert any(path.startswith(f"/services/T0/{hook_path_key}") for path, _ in webhook_receiver.posts)
    assert "401 Unauthorized" in posts  # the failure was announced in chat
    objects = s3.list_objects_v2(Bucket=bucket, Prefix="reports/").get("Contents", [])
    assert objects, "no report was stored in S3"
    reports = "\n".join(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().decode() for o in objects)
    history = b"\n".join(blobs)
    assert b"sec-tester" in history and f"s3://{bucket}/reports/".encode() in history
    log_text = rendered_logs(worker_logging)
    assert "401 Unauthorized" in log_text  # the failure was logged, redacted
    assert "HTTP Request:" not in log_text  # httpx's per-request lines (full URLs) stay out of an INFO log
    cli = "\n".join(outputs)

    for name, text in {"history": history.decode("utf-8", "replace"), "log": log_text, "report": reports,
                       "webhook payload": posts, "CLI output": cli}.items():
        for secret in secrets:
            assert secret not in text, f"a planted secret ({secret[:12]}…) reached the {name}"
        for shape in ("X-Amz-Signature", "X-Amz-Credential", "AWSAccessKeyId", "x-amz-security-token"):
            assert shape not in text, f"a presigned link ({shape}) reached the {name}"


def test_the_fake_api_really_echoes_the_token(kube: FakeKubeApi) -> None:
    """The 401 above is only a test of redaction if the server's body does carry the token."""
    import httpx

    kube.token, kube.echo_auth_in_401 = "right-token", True
    got = httpx.get(f"{kube.url}/apis/apps/v1/namespaces/x/deployments/y", headers={"Authorization": "Bearer wrong-token"})
    assert got.status_code == 401 and "Bearer wrong-token" in got.text
    assert GOOD != BASELINE


async def test_a_basic_credential_echoed_as_bare_base64_reaches_nothing(
        ts_env, tmp_path: Path, prometheus: PrometheusServer, webhook_receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch, worker_logging: pytest.LogCaptureFixture):
    """Issue #29 (a): Prometheus refuses the basic credential from its URL and quotes it back as bare base64 (no
    "Basic" in front, so no credential shape): the password reached the reason, histories, status, log and chat."""
    service, password = "ledger", planted("prom-pass-")
    echo = base64.b64encode(f"promuser:{password}".encode()).decode()
    monkeypatch.setenv("SEC_KUBE_TOKEN", planted("kube-token-"))
    monkeypatch.setenv("SEC_WEBHOOK_URL", f"{webhook_receiver.url}/services/T1/{planted('B1')}")
    front = Front(prometheus.url, failures=10**6, status=401, echo_credential=True)
    task_queue = f"{TASK_QUEUE}-echo"
    try:
        with FakeKubeApi(tick_seconds=0.02, token=os.environ["SEC_KUBE_TOKEN"]) as kube:
            for ns in NAMESPACES.values():
                kube.seed_primary(ns, service, IMAGE.format(BASELINE), replicas=2)
            prom = {"kind": "prometheus", "url": front.url.replace("http://", f"http://promuser:{password}@"),
                    "queries": QUERIES}
            doc = {"targets": [{"region": "us-east-1", "environment": env, "metrics": prom,
                                "deployer": {"kind": "kubernetes", "api_url": kube.url, "token_env": "SEC_KUBE_TOKEN",
                                             "poll_seconds": 0.05, "progress_deadline_seconds": 20, "namespace": ns}}
                               for env, ns in NAMESPACES.items()],
                   "notifications": {"webhooks": [{"name": "releases", "url_env": "SEC_WEBHOOK_URL"}]}}
            (tmp_path / "targets.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            registry = registry_from_targets(load_targets(tmp_path / "targets.yaml"))
            async with build_worker(ts_env.client, registry, task_queue=task_queue):
                req = request(GOOD).model_copy(update={"service": service})
                handle = await ts_env.client.start_workflow(
                    RolloutWorkflow.run, req, id=f"{req.workflow_id}/{uuid.uuid4().hex[:6]}", task_queue=task_queue)
                result = await ops.outcome(handle)
                history, _ = await histories_bytes(ts_env.client, handle, task_queue)
                cli = await cli_status(ts_env.client, handle.id, monkeypatch)
    finally:
        front.close()

    posts = json.dumps([body for _, body in webhook_receiver.posts])
    log_text = rendered_logs(worker_logging)
    surfaces = {"reason": result.reason or "", "history": history.decode("utf-8", "replace"), "log": log_text,
                "webhook payload": posts, "CLI output": cli}
    for name, text in surfaces.items():
        assert "401 Unauthorized" in text, f"the refusal never reached the {name}"  # so the check below means something
        for secret in (password, echo, echo.rstrip("=")):
            assert secret not in text, f"the echoed credential ({secret[:12]}…) reached the {name}"
    assert front.seen and all(h.get("Authorization") == f"Basic {echo}" for h in front.seen)
    assert result.status in ("failed", "rolled_back") and "credential *** is not allowed" in (result.reason or "")
