"""Both images keep Triton's conventions, read from the Dockerfiles (no Docker engine here): the
`tritonserver` command on PATH and at /opt/tritonserver/bin/tritonserver, ports 8000-8002, no
ENTRYPOINT to swallow a deployment's arguments, and a non-root user (Triton's `triton-server`);
and the cloud extra, so that s3://, gs:// and as:// repositories work in them as in Triton's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def final_stage(dockerfile: str) -> str:
    text = (REPO_ROOT / dockerfile).read_text(encoding="utf-8")
    return text[text.rindex("\nFROM ") :]


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_the_image_keeps_tritons_conventions(dockerfile: str) -> None:
    stage = final_stage(dockerfile)
    assert "ENTRYPOINT" not in stage
    assert re.search(r"^EXPOSE 8000 8001 8002$", stage, re.MULTILINE)
    assert re.search(r"ENV [^\n]*(\\\n[^\n]*)*PATH=/opt/tritonserver/bin:", stage)
    assert re.search(r"ln -s \S+ /opt/tritonserver/bin/tritonserver", stage)
    user = re.findall(r"^USER (\S+)$", stage, re.MULTILINE)
    assert user == ["triton-server"]
    assert "useradd --uid 1000" in stage and "triton-server" in stage
    command = re.findall(r"^CMD (.+)$", stage, re.MULTILINE)
    assert command == ['["tritonserver", "--model-repository=/models"]']


def test_tritonserver_is_a_console_script() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = project["project"]["scripts"]
    assert scripts["tritonserver"] == "server.__main__:tritonserver"
    assert scripts["convoy"] == "server.__main__:convoy"


def install_lines(stage: str) -> list[str]:
    """The stage's `RUN` commands, continuation lines joined, split at `&&`."""
    joined = re.sub(r"\\\n\s*", " ", stage)
    runs = re.findall(r"^RUN (.+)$", joined, re.MULTILINE)
    return [part.strip() for run in runs for part in run.split("&&")]


def test_the_cpu_image_installs_the_cloud_extra() -> None:
    lines = install_lines(final_stage("Dockerfile"))
    assert 'pip install "${wheel}[cloud]"' in lines
    assert any(line.startswith('wheel="$(echo /tmp/wheels/convoy-') for line in lines)


def test_the_gpu_image_installs_the_gpu_and_cloud_extras() -> None:
    lines = install_lines(final_stage("Dockerfile.gpu"))
    listing = [line for line in lines if line.startswith("python /tmp/gpu_requirements.py")]
    assert listing == ["python /tmp/gpu_requirements.py convoy gpu cloud > /tmp/requirements.txt"]
    assert "pip install -r /tmp/requirements.txt" in lines


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.gpu"])
def test_the_image_build_fails_on_a_second_top_level_proto_package(dockerfile: str) -> None:
    checks = [
        line for line in install_lines(final_stage(dockerfile)) if "packages_distributions" in line
    ]
    assert len(checks) == 1
    assert "get('proto', [])" in checks[0] and "p != {'convoy'}" in checks[0]


def test_the_cloud_extra_brings_each_schemes_library() -> None:
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert extras["cloud"] == ["convoy[s3,gcs,azure]"]
    named = " ".join(extras["s3"] + extras["gcs"] + extras["azure"])
    assert {"boto3", "gcloud-rest-storage", "azure-storage-blob"} <= set(
        re.findall(r"[\w.-]+", named)
    )
    assert "google-cloud-storage" not in named  # it brings proto-plus, whose `proto` shadows ours
