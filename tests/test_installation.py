"""The installed project as its users run it: no other distribution provides Convoy's top-level
`proto` package (proto-plus, which google-api-core brings, does, and its copy shadows Convoy's
in site-packages), and the console scripts start from outside the repository, no PYTHONPATH."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_only_convoy_provides_the_top_level_proto_package() -> None:
    providers = set(importlib.metadata.packages_distributions().get("proto", []))
    assert providers == {"convoy"}, (
        f"distributions providing a top-level 'proto' package: {sorted(providers)}; any but "
        "convoy shadows Convoy's own. proto-plus comes with google-api-core (an environment "
        "made before the gcs extra moved to gcloud-rest-storage still has it): pip uninstall "
        "google-cloud-storage google-cloud-core google-api-core proto-plus"
    )


@pytest.mark.parametrize(
    ("script", "argument", "expected"),
    [("convoy", "--version", "convoy "), ("tritonserver", "--help", "usage: tritonserver")],
)
def test_the_console_scripts_start_outside_the_repository(
    script: str, argument: str, expected: str, tmp_path: Path
) -> None:
    command = Path(sys.executable).with_name(script)
    assert command.is_file(), f"{command} is missing: reinstall the project (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(command), argument], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(expected), done.stdout
