"""Triton's model loading API in a model.py (`pb_utils.load_model`, `unload_model`,
`is_model_ready`), in a worker process and in the server's: a model loads another (from the
repository, with a config override, or from files it sends), sees it ready, unloads it; what it
cannot do is refused with the reason, and outside explicit model control mode nothing loads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import IN_PROCESS, ConvoyServer, simple_inputs

from scripts import models

# COMMAND (JSON): {"op": "ready" | "load" | "unload", "model": ..., "config": ..., "files":
# {"file:<path>": base64}}; RESULT (JSON): {"value": ...} or {"error": the exception's message}.
MANAGER = """
import base64
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _carry_out(command):
    model = command["model"]
    if command["op"] == "ready":
        return pb_utils.is_model_ready(model, command.get("version", ""))
    if command["op"] == "unload":
        return pb_utils.unload_model(model)
    files = {path: base64.b64decode(data) for path, data in command.get("files", {}).items()}
    return pb_utils.load_model(model, config=command.get("config", ""), files=files or None)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            sent = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy()[0]
            command = json.loads(sent)
            try:
                result = {"value": _carry_out(command)}
            except pb_utils.TritonModelException as exc:
                result = {"error": exc.message()}
            out = np.array([json.dumps(result).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RESULT", out)]))
        return responses
"""
IO = (
    'input [ { name: "COMMAND" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    'output [ { name: "RESULT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
)
MANAGERS = ("manager", "manager_in_process")


def _repository(root: Path) -> Path:
    repo = root / "models"
    for name in MANAGERS:
        config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n' + IO
        models.write_python_model(
            repo, name, MANAGER, config + (IN_PROCESS if name.endswith("in_process") else "")
        )
    models.write_model(repo, "simple", models.simple(), None)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("python-model-loading")
    flags = ["--model-control-mode", "explicit"]
    for name in MANAGERS:
        flags += ["--load-model", name]
    started = ConvoyServer(_repository(root), root / "server.log", *flags).start()
    yield started
    started.kill()


def _ask(server: ConvoyServer, manager: str, **command: object) -> dict[str, object]:
    tensor = grpcclient.InferInput("COMMAND", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([json.dumps(command).encode()], dtype=np.object_))
    with grpcclient.InferenceServerClient(server.url) as client:
        answer = client.infer(manager, [tensor], client_timeout=120).as_numpy("RESULT")
    assert answer is not None
    result: dict[str, object] = json.loads(answer[0])
    return result


def _serves_simple(server: ConvoyServer, model: str = "simple") -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        inputs, a, b = simple_inputs(1)
        np.testing.assert_array_equal(client.infer(model, inputs).as_numpy("OUTPUT0"), a + b)


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_model_loads_sees_ready_and_unloads_another(server: ConvoyServer, manager: str) -> None:
    assert _ask(server, manager, op="ready", model="simple") == {"value": False}
    assert _ask(server, manager, op="load", model="simple") == {"value": None}
    assert _ask(server, manager, op="ready", model="simple") == {"value": True}
    assert _ask(server, manager, op="ready", model="simple", version="1") == {"value": True}
    _serves_simple(server)
    assert _ask(server, manager, op="unload", model="simple") == {"value": None}
    assert _ask(server, manager, op="ready", model="simple") == {"value": False}
    with grpcclient.InferenceServerClient(server.url) as client:
        assert not client.is_model_ready("simple")


@pytest.mark.parametrize("manager", MANAGERS)
def test_a_config_override_and_files_are_loaded_as_the_repository_api_loads_them(
    server: ConvoyServer, manager: str
) -> None:
    config = json.dumps({"name": "simple", "backend": "onnxruntime", "max_batch_size": 4})
    assert _ask(server, manager, op="load", model="simple", config=config) == {"value": None}
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.get_model_config("simple").config.max_batch_size == 4
    # A model the repository does not hold, from the files the manager sends.
    onnx_bytes = models.simple().SerializeToString()
    files = {"file:1/model.onnx": base64.b64encode(onnx_bytes).decode()}
    sent = json.dumps({"name": "sent", "backend": "onnxruntime", "max_batch_size": 8})
    answer = _ask(server, manager, op="load", model="sent", config=sent, files=files)
    assert answer == {"value": None}
    _serves_simple(server, "sent")
    for model in ("simple", "sent"):
        assert _ask(server, manager, op="unload", model=model) == {"value": None}


@pytest.mark.parametrize("manager", MANAGERS)
def test_what_a_model_cannot_load_is_refused_with_the_reason(
    server: ConvoyServer, manager: str
) -> None:
    itself = _ask(server, manager, op="unload", model=manager)
    assert f"model '{manager}' cannot load or unload itself" in str(itself["error"])
    broken = _ask(server, manager, op="load", model="simple", config="{not json")
    assert "Invalid config override" in str(broken["error"])
    missing = _ask(server, manager, op="load", model="nowhere")
    assert "nowhere" in str(missing["error"])
    files = {"file:1/model.onnx": base64.b64encode(b"\x00").decode()}
    unconfigured = _ask(server, manager, op="load", model="sent", files=files)
    assert "'config' must be specified" in str(unconfigured["error"])
    # The server still serves the manager, and nothing was left half loaded.
    assert _ask(server, manager, op="ready", model="nowhere") == {"value": False}


def test_outside_explicit_mode_models_are_only_asked_about(tmp_path: Path) -> None:
    server = ConvoyServer(_repository(tmp_path), tmp_path / "server.log").start()
    try:
        assert _ask(server, "manager", op="ready", model="simple") == {"value": True}
        refused = _ask(server, "manager", op="unload", model="simple")
        assert "explicit model load / unload is not allowed" in str(refused["error"])
        _serves_simple(server)
    finally:
        server.kill()
