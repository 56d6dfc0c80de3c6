"""Triton's wording where programs written against Triton check it, with Triton's status, over
gRPC and HTTP through the unchanged tritonclient: typed contents beside raw contents, a version
that is not a number, and loads that fail (not polled, or failed to build)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, raw_tensor
from onnx import TensorProto
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from scripts import models

INVALID = {"grpc": "StatusCode.INVALID_ARGUMENT", "http": "400"}
INTERNAL = {"grpc": "StatusCode.INTERNAL", "http": "500"}
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)


def _simple_config(name: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] {extra} }},'
        ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    )


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConvoyServer]:
    repo = tmp_path_factory.mktemp("wordings")
    simple = models.simple(TensorProto.FLOAT)
    models.write_model(repo, "simple", simple, _simple_config("simple"))
    # Its label file is missing, so it never builds.
    unlabeled = _simple_config("unlabeled", 'label_filename: "labels.txt"')
    models.write_model(repo, "unlabeled", simple, unlabeled)
    log = tmp_path_factory.mktemp("log") / "server.log"
    running = ConvoyServer(
        repo, log, "--model-control-mode", "explicit", "--load-model", "simple"
    ).start()
    try:
        yield running
        assert running.stop() == 0, running.log()
    finally:
        running.kill()


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(protocol: str, server: ConvoyServer) -> Iterator[Any]:
    if protocol == "grpc":
        opened: Any = grpcclient.InferenceServerClient(server.url)
    else:
        opened = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    with contextlib.closing(opened):
        yield opened


def _api(protocol: str) -> ModuleType:
    return grpcclient if protocol == "grpc" else httpclient


def _inputs(protocol: str) -> list[Any]:
    api = _api(protocol)
    tensors = [api.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(ROW)
    return tensors


def _error(call: Any, *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call(*args, **kwargs)
    return error.value


def test_typed_contents_beside_raw_contents_win_over_the_raw_count(server: ConvoyServer) -> None:
    """Triton's grpc_explicit_int_content_client: one input in raw_input_contents and typed
    contents on the other, so the raw count is wrong too; the contents error is the answer."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    raw_tensor(request, "INPUT0", "FP32", [1, 16]).contents.fp32_contents.extend(ROW[0])
    raw_tensor(request, "INPUT1", "FP32", [1, 16])
    request.raw_input_contents.append(ROW.tobytes())
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.ModelInfer(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == (
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for "
        "model 'simple'"
    )


@pytest.mark.parametrize(
    ("version", "message"),
    [
        pytest.param(
            "latest",
            "failed to get model version from specified version string 'latest' (details: "
            "stol), version should be an integral value > 0",
            id="not-a-number",
        ),
        pytest.param(
            "-1",
            "invalid model version specified '-1' , version should be an integral value > 0",
            id="negative",
        ),
    ],
)
def test_a_version_that_is_not_a_number(
    protocol: str, client: Any, version: str, message: str
) -> None:
    error = _error(client.infer, "simple", _inputs(protocol), model_version=version)
    assert (error.status(), error.message()) == (INVALID[protocol], message)
    error = _error(client.get_model_metadata, "simple", model_version=version)
    assert (error.status(), error.message()) == (INVALID[protocol], message)


def _not_polled(model: str) -> str:
    return f"failed to load '{model}', failed to poll from model repository"


def test_a_malformed_config_override_is_not_polled(protocol: str, client: Any) -> None:
    error = _error(client.load_model, "simple", config="{not json")
    assert error.status() == INTERNAL[protocol]
    assert error.message().startswith(_not_polled("simple") + ": Invalid config override")
    assert client.is_model_ready("simple")


@pytest.mark.parametrize(
    "key", ["file:../escaped/model.onnx", "file:1/../../escaped", "file:/tmp/absolute"]
)
def test_a_bad_file_key_is_not_polled(protocol: str, client: Any, key: str) -> None:
    config = json.dumps({"name": "fresh", "backend": "onnxruntime", "max_batch_size": 8})
    error = _error(client.load_model, "fresh", config=config, files={key: b"x"})
    assert error.status() == INTERNAL[protocol]
    assert error.message().startswith(_not_polled("fresh") + f": invalid file parameter '{key}'")
    assert not client.is_model_ready("fresh")


def test_files_without_a_config_are_not_polled(protocol: str, client: Any) -> None:
    error = _error(client.load_model, "fresh", files={"file:1/model.onnx": b"x"})
    assert error.status() == INTERNAL[protocol]
    assert error.message() == (
        _not_polled("fresh") + ": load parameter 'config' must be specified for model file override"
    )


def test_a_model_in_no_repository_is_not_polled(protocol: str, client: Any) -> None:
    error = _error(client.load_model, "missing")
    assert error.status() == INTERNAL[protocol]
    assert error.message() == _not_polled("missing") + ": model not found in any model repository"


def test_a_model_that_fails_to_build_is_a_failed_load(protocol: str, client: Any) -> None:
    error = _error(client.load_model, "unlabeled")
    assert error.status() == INVALID[protocol]
    assert error.message().startswith("load failed for model 'unlabeled': ")
    assert "'labels.txt' of output 'OUTPUT0'" in error.message()
    assert not client.is_model_ready("unlabeled")


def test_a_label_file_sent_as_a_file_parameter_labels_the_classes(
    protocol: str, client: Any, tmp_path: Path
) -> None:
    """`file:` keys are paths in the model directory, as in Triton: the label file too."""
    models.write_model(tmp_path, "x", models.simple(TensorProto.FLOAT), None)
    model_file = tmp_path / "x" / "1" / "model.onnx"
    config = {
        "name": "labelled",
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [
            {"name": n, "data_type": "TYPE_FP32", "dims": [16]} for n in ("INPUT0", "INPUT1")
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16], "label_filename": "l.txt"},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]},
        ],
    }
    labels = "".join(f"class{i}\n" for i in range(16)).encode("utf-8")
    client.load_model(
        "labelled",
        config=json.dumps(config),
        files={"file:1/model.onnx": model_file.read_bytes(), "file:l.txt": labels},
    )
    api = _api(protocol)
    result = client.infer(
        "labelled",
        _inputs(protocol),
        outputs=[api.InferRequestedOutput("OUTPUT0", class_count=1)],
    )
    assert result.as_numpy("OUTPUT0").tolist() == [[b"30.000000:15:class15"]]
    client.unload_model("labelled")
