"""Triton's auto-complete flags: --disable-auto-complete-config (and --strict-model-config) and
--backend-config default-max-batch-size."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, simple_inputs
from onnx import TensorProto

from scripts import models

DECLARED = """
name: "declared"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_model(repo, "bare", models.simple(TensorProto.FLOAT), None)  # no config.pbtxt
    models.write_model(repo, "declared", models.simple(TensorProto.FLOAT), DECLARED)
    return repo


@pytest.mark.parametrize(
    "flags",
    [("--disable-auto-complete-config",), ("--strict-model-config", "true")],
)
def test_without_auto_complete_a_config_must_declare_its_tensors(
    tmp_path: Path, start_server: StartServer, flags: tuple[str, ...]
) -> None:
    server = start_server(_repository(tmp_path), "--strict-readiness", "false", *flags)
    with grpcclient.InferenceServerClient(server.url) as triton:
        index = {m["name"]: m for m in triton.get_model_repository_index(as_json=True)["models"]}
        assert index["bare"]["state"] == "UNAVAILABLE"
        assert "which the config does not declare" in index["bare"]["reason"]
        inputs, _, _ = simple_inputs(2)
        assert triton.infer("declared", inputs).as_numpy("OUTPUT0").shape == (2, 16)


def test_the_backend_config_sets_the_default_max_batch_size(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(
        _repository(tmp_path), "--backend-config", "onnxruntime,default-max-batch-size=16"
    )
    with grpcclient.InferenceServerClient(server.url) as triton:
        assert triton.get_model_config("bare", as_json=True)["config"]["max_batch_size"] == 16
