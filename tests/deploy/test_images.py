"""Both images keep Triton's conventions, read from the Dockerfiles (no Docker engine here): the
`tritonserver` command on PATH and at /opt/tritonserver/bin/tritonserver, ports 8000-8002, no
ENTRYPOINT to swallow a deployment's arguments, and a non-root user (Triton's `triton-server`)."""

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
    assert scripts["tritonserver"] == "server.cli:tritonserver"
    assert scripts["convoy"] == "server.cli:main"
