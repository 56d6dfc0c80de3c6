"""The Kubernetes and KServe manifests of scripts/deploy/kubernetes, rendered by `kubectl
kustomize` (offline) and validated without a cluster.

Every rendered object of a core kind is validated with `kubernetes-validate` against the strict
schemas (unknown fields fail, as kubectl's strict field validation does) of the oldest and the
newest Kubernetes release it ships here; ServiceMonitor, ScaledObject, the KServe kinds and
prometheus-adapter's rule file are validated against the minimal schemas in `schemas/`, which
refer to the same Kubernetes definitions for the core types inside them. An object of any other
kind fails the test. Then the objects are held to the deployment's own rules: probes, drain
timing, non-root, resources, selectors that meet, and one metric name from the server to the HPA.
Without kubectl the rendering tests skip and say so; the schema checks of hand-made objects run
anyway.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = REPO_ROOT / "scripts" / "deploy" / "kubernetes"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
# The oldest and newest Kubernetes schemas kubernetes-validate ships that the manifests target.
KUBE_VERSIONS = ("1.30", "1.37")
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.yaml",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.yaml",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "servingruntime.yaml",
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"): "servingruntime.yaml",
    ("serving.kserve.io/v1beta1", "InferenceService"): "inferenceservice.yaml",
}
CLUSTER_SCOPED = {"Namespace", "ClusterServingRuntime"}
NAMESPACE = "convoy"
LOAD_METRIC = "convoy_load_ratio"


def kustomizations(kind: str) -> list[Path]:
    """Directories under scripts/deploy/kubernetes whose kustomization.yaml is of this kind."""
    found = []
    for path in sorted(KUBERNETES.rglob("kustomization.yaml")):
        if yaml.safe_load(path.read_text(encoding="utf-8"))["kind"] == kind:
            found.append(path.parent)
    return found


KUSTOMIZATIONS = kustomizations("Kustomization")
COMPONENTS = kustomizations("Component")
OVERLAYS = [path for path in KUSTOMIZATIONS if path.parent.name == "overlays"]
# The overlays a user adds components to (cpu-keda is cpu with the keda component already).
PLAIN_OVERLAYS = [
    path
    for path in OVERLAYS
    if "components" not in yaml.safe_load((path / "kustomization.yaml").read_text("utf-8"))
]


def _id(path: Path) -> str:
    return str(path.relative_to(KUBERNETES))


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not on PATH: `kubectl kustomize` renders the manifests offline")
    return found


@cache
def _render(kubectl: str, directory: Path) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    return copy.deepcopy(list(_render(kubectl, directory)))


def render_with(kubectl: str, overlay: Path, component: Path, tmp_path: Path) -> list[Any]:
    """An overlay with one component added, as a user's kustomization would add it."""
    root = tmp_path / "with-component"
    root.mkdir()
    (root / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(overlay, root)],
                "components": [os.path.relpath(component, root)],
            }
        ),
        encoding="utf-8",
    )
    return render(kubectl, root)


def _strict_schemas(version: str) -> Traversable:
    folder = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    return folder / f"v{version}.0-local-strict"


@cache
def _registry(version: str) -> referencing.Registry[Any]:
    definitions = json.loads(
        (_strict_schemas(version) / "_definitions.json").read_text(encoding="utf-8")
    )
    resource = referencing.Resource.from_contents(definitions)
    return referencing.Registry().with_resource(definitions["$id"], resource)


@cache
def _schema(api_version: str, kind: str, version: str) -> dict[str, Any] | None:
    """The schema of a kind: ours for the CRDs, else kubernetes-validate's strict one (its file
    naming: `deployment-apps-v1.json` for apps/v1 Deployment, the group cut at its first dot)."""
    if (api_version, kind) in CRD_SCHEMAS:
        crd: dict[str, Any] = yaml.safe_load(
            (SCHEMAS / CRD_SCHEMAS[api_version, kind]).read_text(encoding="utf-8")
        )
        return crd
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _strict_schemas(version) / f"{kind.lower()}-{group_version}.json"
    if not path.is_file():
        return None
    core: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return core


@cache
def _validator(api_version: str, kind: str, version: str) -> jsonschema.Validator | None:
    schema = _schema(api_version, kind, version)
    if schema is None:
        return None
    return jsonschema.Draft202012Validator(schema, registry=_registry(version))


def schema_errors(validator: jsonschema.Validator, document: Any) -> list[str]:
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def validation_errors(document: dict[str, Any]) -> list[str]:
    """Why a rendered object is invalid (empty when it is valid), for every version checked."""
    api_version, kind = str(document.get("apiVersion")), str(document.get("kind"))
    errors = []
    for version in KUBE_VERSIONS:
        validator = _validator(api_version, kind, version)
        if validator is None:
            errors.append(f"{version}: no schema for {kind} {api_version}")
        else:
            errors += [f"{version}: {error}" for error in schema_errors(validator, document)]
    return errors


def assert_valid(documents: list[dict[str, Any]]) -> None:
    assert documents, "rendered nothing"
    errors = {f"{d['kind']}/{d['metadata']['name']}": validation_errors(d) for d in documents}
    failures = {name: found for name, found in errors.items() if found}
    assert not failures, json.dumps(failures, indent=2)
    for document in documents:
        if document["kind"] == "ConfigMap" and "config.yaml" in document["data"]:
            config = yaml.safe_load(document["data"]["config.yaml"])
            schema = yaml.safe_load((SCHEMAS / "adapter-config.yaml").read_text("utf-8"))
            errors = schema_errors(jsonschema.Draft202012Validator(schema), config)
            assert not errors, errors


def one(documents: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in documents
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind} {name or ''}: {len(found)} objects"
    return found[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    found: dict[str, Any] = containers[0]
    return found


def flag_value(args: list[str], flag: str) -> str:
    values = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{flag}=")]
    assert len(values) == 1, f"{flag} in {args}"
    return values[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@cache
def serve_usage() -> str:
    return subprocess.run(
        [sys.executable, "-m", "server", "serve", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def assert_known_flags(args: list[str], where: str) -> None:
    for arg in args:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert re.search(rf"{re.escape(flag)}\b", serve_usage()), (
                f"{where} passes {flag}, which `convoy serve` does not know"
            )


# Rendering and validation.


def test_the_layout_has_a_base_and_cpu_and_gpu_overlays() -> None:
    names = {_id(path) for path in KUSTOMIZATIONS}
    assert {"base", "overlays/cpu", "overlays/gpu", "kserve", "prometheus-adapter"} <= names
    assert {_id(path) for path in COMPONENTS} == {"components/keda", "components/ingress-nginx"}


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_id)
def test_every_kustomization_renders_valid_objects(kubectl: str, directory: Path) -> None:
    assert_valid(render(kubectl, directory))


@pytest.mark.parametrize("component", COMPONENTS, ids=_id)
@pytest.mark.parametrize("overlay", PLAIN_OVERLAYS, ids=_id)
def test_every_component_renders_on_every_overlay(
    kubectl: str, overlay: Path, component: Path, tmp_path: Path
) -> None:
    documents = render_with(kubectl, overlay, component, tmp_path)
    assert_valid(documents)
    misplaced = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in documents
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != NAMESPACE
    ]
    assert not misplaced, f"outside namespace {NAMESPACE}: {misplaced}"


@pytest.mark.parametrize("overlay", OVERLAYS, ids=_id)
def test_every_namespaced_object_lands_in_the_namespace(kubectl: str, overlay: Path) -> None:
    documents = render(kubectl, overlay)
    assert one(documents, "Namespace")["metadata"]["name"] == NAMESPACE
    misplaced = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in documents
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != NAMESPACE
    ]
    assert not misplaced, f"outside namespace {NAMESPACE}: {misplaced}"


def test_the_validation_refuses_broken_objects(kubectl: str) -> None:
    """The checks are not vacuous: a typo, a wrong type and a bad duration each fail."""
    deployment = one(render(kubectl, KUBERNETES / "overlays" / "cpu"), "Deployment")
    container(deployment)["readinesProbe"] = container(deployment).pop("readinessProbe")
    assert any("readinesProbe" in error for error in validation_errors(deployment))
    scaled = one(render(kubectl, KUBERNETES / "overlays" / "cpu-keda"), "ScaledObject")
    scaled["spec"]["triggers"][0]["metadata"]["threshold"] = 0.7
    assert any("threshold" in error for error in validation_errors(scaled))
    monitor = one(render(kubectl, KUBERNETES / "base"), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert any("interval" in error for error in validation_errors(monitor))
    runtime = one(render(kubectl, KUBERNETES / "kserve"), "ClusterServingRuntime")
    runtime["spec"]["containers"][0]["resource"] = {}
    assert any("resource" in error for error in validation_errors(runtime))
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validation_errors(unknown)


# What the deployment promises.


@pytest.mark.parametrize("overlay", OVERLAYS, ids=_id)
def test_the_deployment_probes_drains_and_runs_unprivileged(kubectl: str, overlay: Path) -> None:
    documents = render(kubectl, overlay)
    deployment = one(documents, "Deployment", "convoy")
    pod = deployment["spec"]["template"]["spec"]
    server = container(deployment)
    assert server["command"] == ["convoy"] and server["args"][0] == "serve"
    args = server["args"][1:]
    assert_known_flags(args, f"{_id(overlay)} Deployment")
    assert flag_value(args, "--host") == "0.0.0.0"  # probes and scrapes reach the pod IP
    ports = {port["name"]: port["containerPort"] for port in server["ports"]}
    assert ports == {
        "http": int(flag_value(args, "--http-port")),
        "grpc": int(flag_value(args, "--grpc-port")),
        "metrics": int(flag_value(args, "--metrics-port")),
    }
    assert server["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    for probe in ("readinessProbe", "startupProbe"):
        assert server[probe]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # slow model loads
    # preStop sleeps while the endpoints update; then SIGTERM drains for --exit-timeout-secs:
    # both must fit before the kubelet's SIGKILL.
    command = server["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and len(command) == 2
    drain_s = float(command[1]) + float(flag_value(args, "--exit-timeout-secs"))
    assert pod["terminationGracePeriodSeconds"] > drain_s
    # A draining pod refuses the probe's connection: it leaves the endpoints within seconds
    # even when it was not deleted (a deletion removes it at once).
    readiness = server["readinessProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 10
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert server["securityContext"]["allowPrivilegeEscalation"] is False
    assert server["securityContext"]["capabilities"]["drop"] == ["ALL"]
    requests = server["resources"]["requests"]
    assert {"cpu", "memory"} <= set(requests)
    strategy = deployment["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    gpu = "nvidia.com/gpu"
    if overlay.name == "gpu":
        assert server["resources"]["limits"][gpu] == "1"
        assert any(t["key"] == gpu for t in pod["tolerations"])
        assert server["image"].endswith(":gpu")
    else:
        assert gpu not in server["resources"].get("limits", {})


def test_services_monitor_and_budget_select_the_pods(kubectl: str) -> None:
    documents = render(kubectl, KUBERNETES / "overlays" / "cpu")
    deployment = one(documents, "Deployment", "convoy")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"] for p in container(deployment)["ports"]}
    services = {s["metadata"]["name"]: s for s in documents if s["kind"] == "Service"}
    assert set(services) == {"convoy", "convoy-grpc", "convoy-metrics"}
    for service in services.values():
        assert matches(service["spec"]["selector"], pod_labels)
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    assert services["convoy-grpc"]["spec"]["clusterIP"] == "None"  # client-side balancing
    grpc_port = next(p for p in services["convoy"]["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["appProtocol"] == "kubernetes.io/h2c"
    monitor = one(documents, "ServiceMonitor")
    metrics = services["convoy-metrics"]
    assert matches(monitor["spec"]["selector"]["matchLabels"], metrics["metadata"]["labels"])
    server_labels = services["convoy"]["metadata"]["labels"]
    assert not matches(monitor["spec"]["selector"]["matchLabels"], server_labels)  # scraped once
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    budget = one(documents, "PodDisruptionBudget")
    assert matches(budget["spec"]["selector"]["matchLabels"], pod_labels)


def test_the_hpa_the_adapter_and_keda_scale_on_one_metric(kubectl: str) -> None:
    hpa = one(render(kubectl, KUBERNETES / "overlays" / "cpu"), "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "convoy",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == LOAD_METRIC
    target = metric["pods"]["target"]
    assert target["type"] == "AverageValue" and target["averageValue"] == "700m"
    adapter = one(render(kubectl, KUBERNETES / "prometheus-adapter"), "ConfigMap")
    assert adapter["metadata"]["namespace"] == "monitoring"
    (rule,) = yaml.safe_load(adapter["data"]["config.yaml"])["rules"]
    assert rule["name"]["as"] == LOAD_METRIC and LOAD_METRIC in rule["seriesQuery"]
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    keda = render(kubectl, KUBERNETES / "overlays" / "cpu-keda")
    assert not [d for d in keda if d["kind"] == "HorizontalPodAutoscaler"]  # KEDA makes its own
    (trigger,) = one(keda, "ScaledObject")["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert LOAD_METRIC in trigger["metadata"]["query"]
    assert f'namespace="{NAMESPACE}"' in trigger["metadata"]["query"]
    assert float(trigger["metadata"]["threshold"]) == 0.7


def test_the_kserve_runtime_follows_kserve_tritonserver(kubectl: str) -> None:
    documents = render(kubectl, KUBERNETES / "kserve")
    runtime = one(documents, "ClusterServingRuntime")
    spec = runtime["spec"]
    assert {"name": "triton", "version": "2"} in spec["supportedModelFormats"]
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    (server,) = spec["containers"]
    assert server["name"] == "kserve-container"  # the name KServe's controller looks for
    assert server["args"][:2] == ["convoy", "serve"]
    args = server["args"][2:]
    assert_known_flags(args, "the ClusterServingRuntime")
    # kserve-tritonserver's ports and repository path.
    assert flag_value(args, "--http-port") == "8080"
    assert flag_value(args, "--grpc-port") == "9000"
    assert flag_value(args, "--model-repository") == "/mnt/models"
    assert flag_value(args, "--host") == "0.0.0.0"
    assert spec["annotations"]["prometheus.kserve.io/port"] == flag_value(args, "--metrics-port")
    # The drain ends before the SIGKILL at the pod's default grace period (30 s).
    assert float(flag_value(args, "--exit-timeout-secs")) < 30
    service = one(documents, "InferenceService")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"] == {"name": "triton", "version": "2"}
    assert model["protocolVersion"] in spec["protocolVersions"]


def test_an_s3_repository_is_shown_beside_the_volume() -> None:
    text = (KUBERNETES / "base" / "deployment.yaml").read_text(encoding="utf-8")
    assert re.search(r"^\s*# - --model-repository=s3://", text, re.MULTILINE)
    assert re.search(r"^\s*- --model-repository=/models$", text, re.MULTILINE)
