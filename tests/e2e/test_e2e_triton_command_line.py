"""Triton's own deployment command lines, run unchanged through the `tritonserver` command: each
starts on free ports with a small generated repository in place of its own, bound where the
deployment's probes reach it, and answers a kubelet's probes and a Prometheus scrape.

The lines are those of Triton's Helm charts (AWS, GCP, OCI, Fleet Command, k8s on-prem, GKE
Marketplace), KServe's `kserve-tritonserver` runtime, SageMaker's `serve`, Vertex AI's entry
point and the three quick starts (quickstart.md, README.md, deploy.md). Cloud repository URLs
(s3://, gs://) are replaced like local paths: reading them is the repository layer's test."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from onnx import TensorProto
from triton_support import Started, http_get, http_status, tritonserver_command

from scripts import models

DEPLOYMENTS: dict[str, str] = {
    "aws": "tritonserver --model-store=s3://triton-inference-server-repository/model_repository "
    "--model-control-mode=poll --repository-poll-secs=5",
    "gcp": "tritonserver --model-store=gs://triton-inference-server-repository/model_repository",
    "oci": "tritonserver --model-store=s3://https://ns.compat.objectstorage.region.oraclecloud.com"
    ":443/triton-inference-server-repository --model-control-mode=poll --repository-poll-secs=5",
    "fleetcommand": "tritonserver --model-repository=s3://bucket/model_repository "
    "--model-control-mode=poll",
    "k8s-onprem": "tritonserver --model-repository=/models",
    "gke-marketplace": "tritonserver --model-store=gs://triton_sample_models/26.07 "
    "--strict-model-config=False --log-verbose=0 --allow-gpu-metrics=True",
    "kserve": "tritonserver --model-store=/mnt/models --grpc-port=9000 --http-port=8080 "
    "--allow-grpc=true --allow-http=true --model-control-mode=explicit",
    "quickstart": "tritonserver --model-repository=/models",
    "readme": "tritonserver --model-repository=/models --model-control-mode explicit "
    "--load-model densenet_onnx",
    "deploy-md": "tritonserver --model-repository=/models",
    "seed": "tritonserver --model-repository=/models --model-control-mode=poll "
    "--metrics-interval-ms=2000",
}
# Platforms whose endpoints Convoy does not have: the start stops with a clear line.
SAGEMAKER = (
    "tritonserver --allow-sagemaker=true --allow-http=false --model-control-mode=explicit "
    "--model-repository=/opt/ml/model/ --model-namespacing=true --allow-grpc=false "
    "--allow-metrics=false --log-verbose=true "
    "--backend-config=python,shm-default-byte-size=16777216 "
    "--backend-config=python,shm-growth-byte-size=1048576 --load-model=densenet_onnx"
)
VERTEX_ENVIRONMENT = {
    "AIP_MODE": "PREDICTION",
    "AIP_HTTP_PORT": "8080",
    "AIP_STORAGE_URI": "gs://bucket/models",
}
_REPOSITORY_FLAGS = ("--model-store", "--model-repository")
_PORT_FLAGS = ("--http-port", "--grpc-port", "--metrics-port")


def rendered(line: str, repository: Path) -> list[str]:
    """The deployment's arguments with its repository replaced by ours and every port by a free
    one (0: the server picks one and logs it)."""
    words = shlex.split(line)[1:]  # the image's tritonserver replaces the first word
    out: list[str] = []
    pending: str | None = None
    for word in words:
        if pending is not None:
            out.append(str(repository) if pending in _REPOSITORY_FLAGS else "0")
            pending = None
            continue
        flag, equals, _ = word.partition("=")
        if flag in (*_REPOSITORY_FLAGS, *_PORT_FLAGS):
            if not equals:
                pending = flag
                out.append(word)
                continue
            word = f"{flag}={repository if flag in _REPOSITORY_FLAGS else 0}"
        out.append(word)
    given = {w.partition("=")[0] for w in out}
    return out + [f"{flag}=0" for flag in _PORT_FLAGS if flag not in given]


def script_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The installed `tritonserver` as a deployment runs it: no PYTHONPATH to find the project."""
    plain = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**plain, **(extra or {})}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("deployment") / "models"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    models.write_model(repo, "densenet_onnx", models.simple(TensorProto.FLOAT), None)
    return repo


@pytest.fixture(scope="module")
def deployments(
    repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Started]]:
    """Every deployment's server, started at once (they load in parallel), then waited for."""
    logs = tmp_path_factory.mktemp("deployment-logs")
    started = {
        name: Started(
            [*tritonserver_command(), *rendered(line, repository)],
            logs / f"{name}.log",
            environment=script_environment(),
        )
        for name, line in DEPLOYMENTS.items()
    }
    try:
        yield {name: server.wait_serving() for name, server in started.items()}
    finally:
        for server in started.values():
            server.kill()


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_a_deployment_line_starts_and_answers_its_probes(
    deployments: dict[str, Started], name: str
) -> None:
    server = deployments[name]
    # Bound on every address (Triton's 0.0.0.0), so probes to the pod's address reach it.
    assert f"serving gRPC on 0.0.0.0:{server.grpc_port}" in server.log()
    http = f"http://127.0.0.1:{server.http_port}"
    assert http_status(f"{http}/v2/health/live") == 200
    assert http_status(f"{http}/v2/health/ready") == 200
    assert json.loads(http_get(f"{http}/v2"))["name"] == "triton"  # Triton's --id default
    scraped = http_get(f"http://127.0.0.1:{server.metrics_port}/metrics")
    assert "# TYPE nv_inference_request_success counter" in scraped
    assert "nv_cpu_utilization " in scraped


def test_the_readme_line_loads_only_the_model_it_names(deployments: dict[str, Started]) -> None:
    http = f"http://127.0.0.1:{deployments['readme'].http_port}"
    assert http_status(f"{http}/v2/models/densenet_onnx/ready") == 200
    assert http_status(f"{http}/v2/models/simple/ready") == 400


def test_the_seed_line_runs_as_convoy_serve_on_loopback(repository: Path, tmp_path: Path) -> None:
    words = rendered(DEPLOYMENTS["seed"], repository)
    server = Started([sys.executable, "-m", "server", "serve", *words], tmp_path / "seed.log")
    try:
        server.wait_serving()
        assert f"serving gRPC on 127.0.0.1:{server.grpc_port}" in server.log()
        assert http_status(f"http://127.0.0.1:{server.http_port}/v2/health/ready") == 200
        scraped = http_get(f"http://127.0.0.1:{server.metrics_port}/metrics")
        assert "nv_cpu_utilization" in scraped
    finally:
        server.kill()


def test_sagemaker_and_vertex_ai_stop_with_a_clear_line(repository: Path, tmp_path: Path) -> None:
    sagemaker = Started(
        [*tritonserver_command(), *rendered(SAGEMAKER, repository)],
        tmp_path / "sagemaker.log",
        environment=script_environment(),
    )
    assert sagemaker.exit_code() == 1
    assert "--allow-sagemaker=true is not supported" in sagemaker.log()
    # Vertex AI's entry point runs the absolute path with no flags at all.
    vertex = Started(
        ["/opt/tritonserver/bin/tritonserver"]
        if Path("/opt/tritonserver/bin/tritonserver").is_file()
        else tritonserver_command(),
        tmp_path / "vertex.log",
        environment=script_environment(VERTEX_ENVIRONMENT),
    )
    assert vertex.exit_code() == 1
    assert "AIP_MODE=PREDICTION (Vertex AI) is not supported" in vertex.log()


def test_an_unknown_option_gets_tritons_answer(tmp_path: Path) -> None:
    refused = Started(
        [*tritonserver_command(), "--model-repository=/models", "--no-such-flag=1"],
        tmp_path / "unknown.log",
        environment=script_environment(),
    )
    assert refused.exit_code() == 1
    lines = refused.log().splitlines()
    assert lines[0] == "tritonserver: unrecognized option '--no-such-flag=1'"
    assert "Usage: tritonserver [options]" in lines
