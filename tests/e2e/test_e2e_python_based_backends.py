"""Python-based backends, as Triton finds them: a model whose backend Convoy does not serve itself
runs `<--backend-directory>/<backend>/model.py`, with its version directory holding what that
model.py reads (as Triton's vLLM backend reads model.json); `runtime: "model.py"` picks the
Python-based form of any backend."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import IN_PROCESS, StartServer, infer_input

# Adds its version directory's settings.json "offset" to X; tells which backend its config names.
BACKEND = """\
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(version_dir, "settings.json")) as settings:
            self.offset = json.load(settings)["offset"]
        self.backend = json.loads(args["model_config"])["backend"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            tensors = [
                pb_utils.Tensor("Y", x + self.offset),
                pb_utils.Tensor("BACKEND", np.array([[self.backend.encode()]] * len(x), object)),
            ]
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
"""


def _model(repo: Path, name: str, backend: str, offset: float, extra: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "settings.json").write_text(json.dumps({"offset": offset}))
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 4\n{extra}'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] },'
        ' { name: "BACKEND" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    )


@pytest.fixture
def server_url(tmp_path: Path, start_server: StartServer, python_mode: str) -> str:
    backends = tmp_path / "backends"
    for backend in ("adder", "onnxruntime"):
        (backends / backend).mkdir(parents=True)
        (backends / backend / "model.py").write_text(BACKEND)
    repo = tmp_path / "repo"
    extra = IN_PROCESS if python_mode == "in-process" else ""
    _model(repo, "plus_one", "adder", 1.0, extra)
    _model(repo, "plus_hundred", "adder", 100.0, extra)
    # Convoy serves onnxruntime itself; runtime "model.py" asks for its Python-based form.
    _model(repo, "ort_in_python", "onnxruntime", 7.0, extra + 'runtime: "model.py"\n')
    _model(repo, "no_such_runtime", "adder", 0.0, 'runtime: "other.py"\n')
    _model(repo, "no_such_backend", "tensorflow", 0.0)
    server = start_server(repo, "--backend-directory", str(backends), "--strict-readiness", "false")
    return server.url


def test_a_python_based_backend_serves_every_model_that_names_it(server_url: str) -> None:
    with grpcclient.InferenceServerClient(server_url) as triton:
        x = np.array([[1.5], [2.5]], np.float32)
        for model, offset, backend in (
            ("plus_one", 1.0, b"adder"),
            ("plus_hundred", 100.0, b"adder"),
            ("ort_in_python", 7.0, b"onnxruntime"),
        ):
            answer = triton.infer(model, [infer_input("X", x, "FP32")])
            np.testing.assert_array_equal(answer.as_numpy("Y"), x + offset)
            assert answer.as_numpy("BACKEND").ravel().tolist() == [backend, backend]
            # The config keeps the backend it names, as Triton reports it.
            assert triton.get_model_config(model).config.backend == backend.decode()
        index = {m.name: m for m in triton.get_model_repository_index().models}
        assert index["no_such_runtime"].state == "UNAVAILABLE"
        assert "runtime 'other.py' names a Python-based backend" in index["no_such_runtime"].reason
        assert index["no_such_backend"].state == "UNAVAILABLE"
        assert "or a Python-based backend" in index["no_such_backend"].reason
