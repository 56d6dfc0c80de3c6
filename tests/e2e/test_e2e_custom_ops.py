"""ONNX Runtime custom operators: `model_operations { op_library_filename }` registers a library
of them with the model's sessions, as in Triton (here onnxruntime-extensions' library and its
StringUpper); a model without it, or with a library that cannot load, fails its load saying why."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, infer_input
from onnx import TensorProto, helper

from scripts import models


def _library_path() -> str:
    """onnxruntime-extensions' custom operator library, found without importing the package:
    its import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in the environment, which
    every server this session starts afterwards would inherit."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    assert spec is not None and spec.origin is not None
    (library,) = Path(spec.origin).parent.glob("_extensions_pydll*.so")
    return str(library)


def _upper() -> onnx.ModelProto:
    node = helper.make_node("StringUpper", ["TEXT"], ["UPPER"], domain="ai.onnx.contrib")
    graph = helper.make_graph(
        [node],
        "upper",
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["batch"])],
        [helper.make_tensor_value_info("UPPER", TensorProto.STRING, ["batch"])],
    )
    opsets = [helper.make_opsetid("", models.OPSET), helper.make_opsetid("ai.onnx.contrib", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=models.IR_VERSION)


def _config(name: str, libraries: list[str]) -> str:
    operations = "".join(
        f'model_operations {{ op_library_filename: "{lib}" }}\n' for lib in libraries
    )
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n{operations}'
        'input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )


def test_a_custom_operator_library_serves_its_operators(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = tmp_path / "repo"
    for name, libraries in (
        ("upper", [_library_path()]),
        ("upper_without_library", []),
        ("upper_missing_library", [str(tmp_path / "libnothing.so")]),
    ):
        models.write_model(repo, name, _upper(), _config(name, libraries))
    server = start_server(repo, "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as triton:
        text = np.array([b"convoy", b"Triton"], dtype=object)
        answer = triton.infer("upper", [infer_input("TEXT", text, "BYTES")])
        assert answer.as_numpy("UPPER").tolist() == [b"CONVOY", b"TRITON"]
        index = {m.name: m for m in triton.get_model_repository_index().models}
        assert index["upper_without_library"].state == "UNAVAILABLE"
        assert "StringUpper" in index["upper_without_library"].reason
        missing = index["upper_missing_library"]
        assert missing.state == "UNAVAILABLE"
        assert "libnothing.so' (model_operations op_library_filename) could not be loaded" in (
            missing.reason
        )
