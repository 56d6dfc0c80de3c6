"""ONNX Runtime's usage telemetry stays off in a served server and in the Python model processes
it starts: nothing is stored under the home directory, a model's worker sees the variable that
turns it off, and a choice the environment makes is kept."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer

from scripts import models
from scripts.gen_models import write_mlp
from server.contract.framework_telemetry import ORT_DISABLE_TELEMETRY as VARIABLE

# Opens an ONNX Runtime session of its own, and answers the variable as its worker sees it.
SEEN = """
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from onnx import TensorProto, helper


class TritonPythonModel:
    def initialize(self, args):
        tensor = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        node = helper.make_node("Identity", ["x"], ["y"])
        graph = helper.make_graph([node], "g", [tensor], [out])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        self.session = ort.InferenceSession(model.SerializeToString())

    def execute(self, requests):
        seen = os.environ.get("ORT_DISABLE_TELEMETRY", "unset").encode()
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            self.session.run(None, {"x": x})
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SEEN", np.array([seen], dtype=object))]
            ))
        return answers
"""
SEEN_CONFIG = """\
name: "seen"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def _serve_and_ask(tmp_path: Path, choice: str | None) -> tuple[str, Path]:
    """Serve an ONNX model and the `seen` model with HOME in `tmp_path` and `choice` as the
    variable (None: unset); answer both, and return what the worker saw and the home."""
    repo, home = tmp_path / "repo", tmp_path / "home"
    home.mkdir()
    write_mlp(repo)
    models.write_python_model(repo, "seen", SEEN, SEEN_CONFIG)
    env = {key: value for key, value in os.environ.items() if key != VARIABLE}
    env["HOME"] = str(home)
    if choice is not None:
        env[VARIABLE] = choice
    server = ConvoyServer(repo, tmp_path / "server.log", env=env).start()
    try:
        client = grpcclient.InferenceServerClient(server.url)
        image = grpcclient.InferInput("INPUT", [2, 256], "FP32")
        image.set_data_from_numpy(np.ones((2, 256), np.float32))
        assert client.infer("mlp", [image]).as_numpy("OUTPUT").shape == (2, 10)
        x = grpcclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.ones(1, np.float32))
        seen = client.infer("seen", [x]).as_numpy("SEEN")[0].decode()
        client.close()
    finally:
        server.stop()
    return seen, home


def test_nothing_is_collected_by_default(tmp_path: Path) -> None:
    seen, home = _serve_and_ask(tmp_path, None)
    assert seen == "1"
    assert not (home / ".cache" / "Microsoft").exists(), sorted(home.rglob("*"))


@pytest.mark.parametrize("choice", ["0", "1"])
def test_the_environments_choice_is_kept(tmp_path: Path, choice: str) -> None:
    seen, _ = _serve_and_ask(tmp_path, choice)
    assert seen == choice
