"""A python model's own execution environment (Triton's `EXECUTION_ENV_PATH`): its worker runs on
the environment's interpreter, with the environment's packages, whether the environment is a
directory or a tarball beside the model (`$$TRITON_MODEL_DIRECTORY`); an environment that is
missing, or one asked of a model in the server's process, fails the model's load with the
reason, and the other models serve."""

from __future__ import annotations

import json
import sys
import tarfile
import venv
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import IN_PROCESS, ConvoyServer, infer_input

from scripts import models

# Says whether `envmarker` (only in the environment) imports, and which Python runs it.
SHOW = """
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import envmarker

    WHERE = envmarker.WHERE
except ImportError:
    WHERE = "absent"


class TritonPythonModel:
    def execute(self, requests):
        shown = json.dumps({"marker": WHERE, "prefix": sys.prefix})
        out = np.array([shown.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SHOWN", out)]) for _ in requests]
"""
IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "SHOWN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
)


def _environment(where: Path) -> Path:
    """A Python environment at `where` (a venv of its own interpreter) with `envmarker`, which
    the server's environment lacks, and NumPy through a .pth to the server's packages."""
    venv.EnvBuilder(with_pip=False, symlinks=False).create(where)
    site = where / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = site / "site-packages"
    (site / "envmarker.py").write_text(f"WHERE = {str(where.name)!r}\n", encoding="utf-8")
    numpy_site = Path(np.__file__).resolve().parents[1]
    (site / "server_numpy.pth").write_text(f"{numpy_site}\n", encoding="utf-8")
    return where


def _config(name: str, env_path: str, extra: str = "") -> str:
    parameter = (
        f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{env_path}" }} }}\n'
    )
    return f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n' + IO + parameter + extra


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("python-environment")
    repo = root / "models"
    directory = models.write_python_model(
        repo, "env_dir", SHOW, _config("env_dir", "$$TRITON_MODEL_DIRECTORY/env_a")
    )
    _environment(directory / "env_a")
    packed = models.write_python_model(
        repo, "env_tar", SHOW, _config("env_tar", "$$TRITON_MODEL_DIRECTORY/env_b.tar.gz")
    )
    with tarfile.open(packed / "env_b.tar.gz", "w:gz") as archive:
        archive.add(_environment(root / "env_b"), arcname=".")
    plain = 'name: "server_env"\nbackend: "python"\nmax_batch_size: 0\n' + IO
    models.write_python_model(repo, "server_env", SHOW, plain)
    missing = _config("missing", "$$TRITON_MODEL_DIRECTORY/nowhere.tar.gz")
    models.write_python_model(repo, "missing", SHOW, missing)
    in_process = _config("in_process", str(directory / "env_a"), IN_PROCESS)
    models.write_python_model(repo, "in_process", SHOW, in_process)
    started = ConvoyServer(repo, root / "server.log").start()
    yield started
    started.kill()


def _shown(server: ConvoyServer, model: str) -> dict[str, str]:
    with grpcclient.InferenceServerClient(server.url) as client:
        x = infer_input("X", np.zeros(1, np.float32), "FP32")
        answer = client.infer(model, [x]).as_numpy("SHOWN")
    assert answer is not None
    shown: dict[str, str] = json.loads(answer[0])
    return shown


@pytest.mark.parametrize(("model", "marker"), [("env_dir", "env_a"), ("env_tar", "env_b")])
def test_a_model_runs_on_its_own_environment(server: ConvoyServer, model: str, marker: str) -> None:
    shown = _shown(server, model)
    assert shown["marker"] == marker
    assert shown["prefix"] != sys.prefix


def test_without_one_a_model_runs_on_the_servers_python(server: ConvoyServer) -> None:
    assert _shown(server, "server_env") == {"marker": "absent", "prefix": sys.prefix}


def test_a_missing_environment_or_one_in_process_fails_that_load_alone(
    server: ConvoyServer,
) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    finally:
        client.close()
    assert "nowhere.tar.gz' does not exist" in index["missing"]["reason"]
    assert "cannot use" in index["in_process"]["reason"]
    with grpcclient.InferenceServerClient(server.url) as triton:
        assert not triton.is_model_ready("missing") and not triton.is_model_ready("in_process")
        assert triton.is_model_ready("env_dir")
