"""Instance placement on a machine without a usable GPU: KIND_GPU is a clear load error beside
healthy models, KIND_AUTO runs on CPU and the config says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, simple_inputs

from backends import cuda_available
from scripts import models

pytestmark = pytest.mark.skipif(cuda_available(), reason="checks the CPU-only behaviour")


def _config(name: str, group: str) -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        f"instance_group [ {group} ]\n"
    )


def test_kind_gpu_fails_its_load_clearly_and_kind_auto_runs_on_cpu(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "on_gpu", models.simple(), _config("on_gpu", "{ kind: KIND_GPU }"))
    models.write_model(
        repo, "anywhere", models.simple(), _config("anywhere", "{ kind: KIND_AUTO count: 2 }")
    )
    server = start_server(repo, "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as triton:
        index = {m["name"]: m for m in triton.get_model_repository_index(as_json=True)["models"]}
        assert index["on_gpu"]["state"] == "UNAVAILABLE"
        assert "instance group 'on_gpu_0' has kind KIND_GPU" in index["on_gpu"]["reason"]
        assert triton.is_model_ready("anywhere")
        group = triton.get_model_config("anywhere", as_json=True)["config"]["instance_group"][0]
        assert (group["kind"], group["count"]) == ("KIND_CPU", 2)
        inputs, a, b = simple_inputs(2)
        result = triton.infer("anywhere", inputs)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
