"""deploy/: every YAML file parses; the Kubernetes objects are valid for the official client's models
and wired to each other (targets file, mounts, secrets, RBAC); the CI example and Dockerfile fit the CLI.

Nothing here talks to a cluster or Docker: neither exists on the dev machine.
"""

from __future__ import annotations

import copy
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from kubernetes import config as kube_config

from activities.adapters.targets import KubernetesDeployerConfig, SimulatedDeployerConfig, TargetsFile, parse_targets
from bifrost_cli.exits import EXIT_ABORTED, EXIT_INVALID, EXIT_OK, EXIT_ROLLED_BACK, EXIT_UNREACHABLE
from tests.deploy.manifests import (
    DEPLOY,
    KUBERNETES,
    KUSTOMIZATION,
    MODELS,
    ROOT,
    find,
    kubernetes_objects,
    load_documents,
    lost_fields,
    round_trip,
    yaml_files,
)
from worker.build import build_worker
from workflows.plan import build_plan
from workflows.request import load_request

WORKER = "bifrost-worker"
NAMESPACE = "bifrost"
EXAMPLE_REQUEST = DEPLOY / "examples" / "request.yaml"
DEPLOYER_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}


# -- every file ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_under_deploy_parses(path: Path) -> None:
    assert load_documents(path), f"{path} holds no YAML document"


def test_the_deploy_folder_has_the_expected_files() -> None:
    names = {str(p.relative_to(DEPLOY)) for p in yaml_files()}
    assert {"ci/github-actions.yml", "kubernetes/deployment.yaml", "kubernetes/rbac.yaml",
            "kubernetes/configmap.yaml", "kubernetes/serviceaccount.yaml", "kubernetes/namespace.yaml"} <= names


# -- Kubernetes objects ----------------------------------------------------------------------------
def _object_id(file: str, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{file}:{obj.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name')}"


@pytest.mark.parametrize("obj", [o for _, o in kubernetes_objects()], ids=[_object_id(f, o) for f, o in kubernetes_objects()])
def test_kubernetes_object_has_a_known_kind_and_matches_the_client_model(obj: dict[str, Any]) -> None:
    assert obj.get("apiVersion") and obj.get("kind"), obj
    assert obj.get("metadata", {}).get("name"), f"{obj['kind']} without metadata.name"
    assert obj["kind"] in MODELS, f"add {obj['kind']} to MODELS so its fields are checked"
    lost = lost_fields(obj, round_trip(obj, MODELS[obj["kind"]]))
    assert not lost, f"{obj['kind']}/{obj['metadata']['name']}: fields the client model does not know: {lost}"


def test_the_model_check_catches_a_misspelt_field_and_a_wrong_type() -> None:
    (deployment,) = find("Deployment", WORKER)
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    assert lost_fields(typo, round_trip(typo, "V1Deployment")) == [
        "spec.template.spec.containers[0].imagePullPolice: unknown field"
    ]
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "45"
    with pytest.raises(pydantic.ValidationError, match="terminationGracePeriodSeconds"):
        round_trip(wrong_type, "V1Deployment")


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = load_documents(KUBERNETES / "kustomization.yaml")
    assert kustomization["kind"] == KUSTOMIZATION
    manifests = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


# -- how the objects fit together ------------------------------------------------------------------
def _worker() -> tuple[dict[str, Any], dict[str, Any]]:
    """The worker Deployment's pod spec and its one container."""
    (deployment,) = find("Deployment", WORKER, NAMESPACE)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def _mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Container path -> (volume kind, ConfigMap/Secret name, key) for every ConfigMap/Secret item mounted."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for mount in container["volumeMounts"]:
        vol = volumes[mount["name"]]
        for kind, ref in (("configMap", "name"), ("secret", "secretName")):
            if kind in vol:
                for item in vol[kind]["items"]:
                    out[f"{mount['mountPath']}/{item['path']}"] = (kind, vol[kind][ref], item["key"])
    return out


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _targets() -> TargetsFile:
    pod, container = _worker()
    kind, name, key = _mounted_files(pod, container)[_arg(container["args"], "--targets")]
    assert kind == "configMap"
    (configmap,) = find("ConfigMap", name, NAMESPACE)
    return parse_targets(yaml.safe_load(configmap["data"][key]), f"configmap {name}/{key}")


def test_worker_runs_bifrost_worker_with_the_targets_file_from_the_configmap() -> None:
    _, container = _worker()
    assert container["args"][0] == "worker"
    assert _arg(container["args"], "--targets") == "/etc/bifrost/targets.yaml"
    targets = _targets()  # mounted from the ConfigMap and valid for activities.targets
    assert targets.targets


def test_every_stage_of_the_example_request_has_a_real_deployer() -> None:
    """An unlisted stage would fall back to the simulated fleet and 'succeed' without deploying."""
    targets = _targets()
    real = {t.key for t in targets.targets if t.deployer is not None and not isinstance(t.deployer, SimulatedDeployerConfig)}
    stages = {s.key for s in build_plan(load_request(EXAMPLE_REQUEST)).stages()}
    assert stages <= real, f"stages without a real deployer: {sorted(stages - real)}"


def test_every_secret_and_file_the_targets_name_is_provided() -> None:
    pod, container = _worker()
    targets = _targets()
    env = {e["name"] for e in container["env"]}
    needed_env = {t.deployer.token_env for t in targets.targets
                  if isinstance(t.deployer, KubernetesDeployerConfig) and t.deployer.token_env}
    needed_env |= {w.url_env for w in targets.notifications.webhooks}
    assert needed_env <= env, f"unset in the Deployment: {sorted(needed_env - env)}"
    files = _mounted_files(pod, container)
    needed_files = {p for t in targets.targets if isinstance(t.deployer, KubernetesDeployerConfig)
                    for p in (t.deployer.ca_file, t.deployer.kubeconfig) if p}
    assert needed_files <= set(files), f"not mounted: {sorted(needed_files - set(files))}"


def test_temporal_connection_comes_from_env_and_the_api_key_from_a_secret() -> None:
    _, container = _worker()
    env = {e["name"]: e for e in container["env"]}
    assert env["TEMPORAL_ADDRESS"]["value"] and env["TEMPORAL_NAMESPACE"]["value"]
    ref = env["TEMPORAL_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"]
    for e in container["env"]:
        assert "value" not in e or not re.search(r"(?i)token|key|secret|password", e["name"]), \
            f"{e['name']} is a secret written as a literal value"


def test_grace_period_covers_the_workers_graceful_shutdown() -> None:
    pod, _ = _worker()
    graceful = inspect.signature(build_worker).parameters["graceful_shutdown"].default.total_seconds()
    assert graceful == 30
    assert graceful < pod["terminationGracePeriodSeconds"] <= graceful + 30


def test_worker_has_resources_and_runs_as_the_images_non_root_user() -> None:
    pod, container = _worker()
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][bound]), bound
    assert pod["securityContext"]["runAsNonRoot"] is True
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"USER {pod['securityContext']['runAsUser']}:" in dockerfile
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert _arg(container["args"], "--reports") in writable and "/tmp" in writable


def test_service_account_is_the_workers_and_rbac_grants_what_the_deployer_calls() -> None:
    pod, _ = _worker()
    assert find("ServiceAccount", pod["serviceAccountName"], NAMESPACE)
    service = load_request(EXAMPLE_REQUEST).service
    in_cluster = [t.deployer for t in _targets().targets
                  if isinstance(t.deployer, KubernetesDeployerConfig) and t.deployer.kubeconfig]
    namespaces = {d.namespace.replace("{service}", service) for d in in_cluster}
    assert namespaces, "no target in the worker's own cluster"
    for ns in sorted(namespaces):
        (role,) = find("Role", namespace=ns)
        rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
        assert rules[(("apps",), ("deployments",))] == DEPLOYER_VERBS, ns
        assert rules[(("",), ("pods",))] <= {"get", "list", "watch"}, ns
        # pre-warm finds the HPA scaling a primary and moves its floor (activities/adapters/kubernetes/deployer.py)
        assert rules[(("autoscaling",), ("horizontalpodautoscalers",))] == {"get", "list", "patch"}, ns
        assert all("*" not in (*g, *r, *v) for (g, r), v in rules.items()), f"{ns}: wildcard in a rule"
        (binding,) = find("RoleBinding", namespace=ns)
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": role["metadata"]["name"]}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                        "namespace": NAMESPACE}]


def test_in_cluster_kubeconfig_is_understood_by_the_official_client(tmp_path: Path) -> None:
    """The ConfigMap's kubeconfig, with its CA and token paths pointed at test files."""
    pod, container = _worker()
    kubeconfig_path = next(d.kubeconfig for t in _targets().targets
                           if isinstance((d := t.deployer), KubernetesDeployerConfig) and d.kubeconfig)
    context = next(t.deployer.context for t in _targets().targets
                   if isinstance(t.deployer, KubernetesDeployerConfig) and t.deployer.kubeconfig)
    _, name, key = _mounted_files(pod, container)[kubeconfig_path]
    (configmap,) = find("ConfigMap", name, NAMESPACE)
    text = configmap["data"][key]
    sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert f"{sa_dir}/token" in text and f"{sa_dir}/ca.crt" in text
    (tmp_path / "token").write_text("sa-token-123")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    config_file = tmp_path / "kubeconfig"
    config_file.write_text(text.replace(sa_dir, str(tmp_path)))
    client = kube_config.new_client_from_config(config_file=str(config_file), context=context, persist_config=False)
    conf = client.configuration
    assert conf.host == "https://kubernetes.default.svc"
    assert conf.api_key["BearerToken"].endswith("sa-token-123")
    assert conf.ssl_ca_cert and Path(conf.ssl_ca_cert).read_text().startswith("-----BEGIN CERTIFICATE-----")


# -- CI example -------------------------------------------------------------------------------------
def _workflow() -> dict[Any, Any]:
    (workflow,) = load_documents(DEPLOY / "ci" / "github-actions.yml")
    return workflow


def test_github_actions_runs_on_push_to_main() -> None:
    workflow = _workflow()
    on = workflow.get("on", workflow.get(True))  # YAML 1.1: a bare `on` key loads as True
    assert on == {"push": {"branches": ["main"]}}


def test_github_actions_submits_the_example_request_and_waits() -> None:
    (job,) = _workflow()["jobs"].values()
    steps = job["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/checkout@") for u in uses)
    (setup,) = [s for s in steps if s.get("uses", "").startswith("actions/setup-python@")]
    assert str(setup["with"]["python-version"]) == "3.11"
    assert any("pip install ." in s.get("run", "") for s in steps)
    (submit,) = [s for s in steps if "bifrost submit" in s.get("run", "")]
    command = next(line for line in submit["run"].splitlines() if "bifrost submit" in line).split()
    assert command[:2] == ["bifrost", "submit"] and "--wait" in command
    assert (ROOT / command[2]).resolve() == EXAMPLE_REQUEST.resolve()
    load_request(ROOT / command[2])  # a valid request
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY"):
        assert submit["env"][name] == f"${{{{ secrets.{name} }}}}"
    assert submit["env"]["BIFROST_USER"] == "${{ github.actor }}"


def test_github_actions_explains_the_exit_codes_of_the_cli() -> None:
    text = (DEPLOY / "ci" / "github-actions.yml").read_text()
    documented = {int(m) for m in re.findall(r"^#\s+(\d)\s{2,}\S", text, flags=re.M)}
    assert documented == {EXIT_OK, EXIT_ROLLED_BACK, EXIT_INVALID, EXIT_ABORTED, EXIT_UNREACHABLE}
    assert "attaches to the running rollout" in text


# -- Dockerfile -------------------------------------------------------------------------------------
def test_dockerfile_copies_every_package_and_runs_the_worker_as_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, flags=re.M)
    assert re.search(r"^RUN pip install \.", text, flags=re.M)
    assert 'ENTRYPOINT ["bifrost"]' in text and 'CMD ["worker"]' in text
    user = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert user and not user[-1].startswith(("0", "root"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", text, flags=re.M))
    assert packages == copied, f"pyproject packages {sorted(packages)} vs copied {sorted(copied)}"
    assert "COPY pyproject.toml README.md ./" in text  # pyproject's readme is needed to build
