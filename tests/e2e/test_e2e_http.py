"""HTTP/REST v2 beside gRPC, driven by the unchanged `tritonclient.http` client: health,
metadata, config, inference with JSON and binary tensors, errors, statistics and the repository."""

from __future__ import annotations

import base64
import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from e2e_support import (
    IDENTITY_TYPES,
    ConvoyServer,
    StartServer,
    bits,
    http_input,
    identity_model,
    sample_array,
)
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models


@pytest.fixture(scope="module")
def http(convoy: ConvoyServer) -> Iterator[httpclient.InferenceServerClient]:
    assert convoy.http_port
    with contextlib.closing(
        httpclient.InferenceServerClient(f"127.0.0.1:{convoy.http_port}")
    ) as client:
        yield client


def raw(server: ConvoyServer, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
    """Status and body of one plain HTTP request (POST when there is a body)."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_health_and_server_metadata(
    http: httpclient.InferenceServerClient, convoy: ConvoyServer
) -> None:
    assert http.is_server_live()
    assert http.is_server_ready()
    assert http.is_model_ready("simple")
    assert http.is_model_ready("simple", "1")
    assert not http.is_model_ready("no_such_model")
    assert raw(convoy, "/v2/health/live") == (200, b"")
    metadata = http.get_server_metadata()
    assert metadata["name"] == "convoy"
    assert "binary_tensor_data" in metadata["extensions"]


def test_model_metadata_and_config(http: httpclient.InferenceServerClient) -> None:
    metadata = http.get_model_metadata("simple")
    assert metadata["name"] == "simple"
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    assert [o["name"] for o in metadata["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert http.get_model_metadata("simple", "1")["versions"] == ["1"]
    config = http.get_model_config("simple")
    assert config["name"] == "simple"
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [16]
    assert config["input"][0]["data_type"] == "TYPE_FP32"


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("model, datatype", [("simple", "FP32"), ("simple_int32", "INT32")])
def test_infer_simple(
    http: httpclient.InferenceServerClient, model: str, datatype: str, binary: bool
) -> None:
    a = sample_array(datatype, (3, 16), 1, extremes=False)
    b = sample_array(datatype, (3, 16), 2, extremes=False)
    if datatype == "INT32":  # away from the edges, where a + b would wrap
        a, b = a // 4, b // 4
    result = http.infer(
        model,
        [http_input("INPUT0", a, datatype, binary), http_input("INPUT1", b, datatype, binary)],
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
        ],
        request_id=f"req-{datatype}-{binary}",
    )
    response = result.get_response()
    assert response["id"] == f"req-{datatype}-{binary}"
    assert response["model_name"] == model
    for output in response["outputs"]:
        assert ("data" in output) is not binary
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_every_output_binary_when_asked_for_all(http: httpclient.InferenceServerClient) -> None:
    a = sample_array("FP32", (1, 16), 3, extremes=False)
    inputs = [http_input("INPUT0", a, "FP32", False), http_input("INPUT1", a, "FP32", False)]
    result = http.infer("simple", inputs)  # no outputs named: tritonclient asks binary for all
    assert all("data" not in o for o in result.get_response()["outputs"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_bytes(http: httpclient.InferenceServerClient, binary: bool) -> None:
    words = np.array([["alpha", "naïve", ""], ["日本語", "b", "c"]], dtype=object)
    result = http.infer(
        "identity_bytes",
        [http_input("INPUT0", words, "BYTES", binary)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)],
    )
    got = result.as_numpy("OUTPUT0")
    assert got.shape == (2, 3)
    text = [w.decode("utf-8") if isinstance(w, bytes) else w for w in got.flat]
    assert text == list(words.flat)


def test_nested_json_data_and_priority(convoy: ConvoyServer) -> None:
    row = [float(i) for i in range(16)]
    request = {
        "id": "nested",
        "parameters": {"priority": 0, "timeout": 10_000_000},
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [row]},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": row},
        ],
    }
    status, body = raw(convoy, "/v2/models/simple/infer", request)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["id"] == "nested"
    outputs = {o["name"]: o for o in answer["outputs"]}
    assert outputs["OUTPUT0"]["data"] == [2 * v for v in row]
    assert outputs["OUTPUT1"]["shape"] == [1, 16]


def error_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call(*args, **kwargs)
    return error.value


def test_errors_answer_status_and_json(
    http: httpclient.InferenceServerClient, convoy: ConvoyServer
) -> None:
    status, body = raw(convoy, "/v2/models/no_such_model")
    assert status == 404
    assert "no_such_model" in json.loads(body)["error"]
    a = np.zeros((1, 16), dtype=np.float32)
    unknown = error_of(http.infer, "no_such_model", [http_input("INPUT0", a, "FP32", True)])
    assert unknown.status() == "404"
    wrong = np.zeros((1, 5), dtype=np.float32)
    bad = error_of(
        http.infer,
        "simple",
        [http_input("INPUT0", wrong, "FP32", True), http_input("INPUT1", wrong, "FP32", True)],
    )
    assert bad.status() == "400"
    assert "INPUT0" in bad.message()
    status, body = raw(convoy, "/v2/models/simple/infer", {"inputs": "nope"})
    assert status == 400
    assert "inputs" in json.loads(body)["error"]
    status, body = raw(convoy, "/v2/repository/models/simple/unload", {})
    assert status == 503  # none mode: no model control
    assert "not allowed" in json.loads(body)["error"]


def test_statistics_and_repository_index(http: httpclient.InferenceServerClient) -> None:
    a = np.ones((2, 16), dtype=np.float32)
    http.infer(
        "simple", [http_input("INPUT0", a, "FP32", True), http_input("INPUT1", a, "FP32", True)]
    )
    (stats,) = http.get_inference_statistics("simple")["model_stats"]
    assert stats["name"] == "simple"
    assert stats["version"] == "1"
    assert isinstance(stats["inference_count"], int) and stats["inference_count"] >= 2
    assert stats["inference_stats"]["success"]["count"] >= 1
    every = http.get_inference_statistics()["model_stats"]
    assert {"simple", "identity_bytes"} <= {s["name"] for s in every}
    index = {entry["name"]: entry for entry in http.get_model_repository_index()}
    assert index["simple"]["state"] == "READY"
    assert index["broken_typo"]["state"] == "UNAVAILABLE"


def test_explicit_load_with_config_and_file_and_unload(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    repo.mkdir()
    server = start_server(repo, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        # Inputs and outputs are left to auto-complete from the model file.
        config = {"name": "loaded", "backend": "onnxruntime", "max_batch_size": 4}
        model = models.simple(TensorProto.INT32).SerializeToString()
        status, body = raw(
            server,
            "/v2/repository/models/loaded/load",
            {
                "parameters": {
                    "config": json.dumps(config),
                    "file:1/model.onnx": base64.b64encode(model).decode("ascii"),
                }
            },
        )
        assert status == 200, body
        assert client.is_model_ready("loaded")
        assert client.get_model_config("loaded")["max_batch_size"] == 4
        assert client.get_model_metadata("loaded")["inputs"][0]["datatype"] == "INT32"
        client.unload_model("loaded")
        assert not client.is_model_ready("loaded")
    finally:
        client.close()


def test_http_can_be_turned_off(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    server = start_server(repo, "--allow-http", "false")
    assert server.grpc_port and server.http_port == 0
    assert "HTTP on" not in server.log()


# Every data type in binary and in JSON, but BF16, which has no JSON form (binary only).
ROUND_TRIPS = [
    pytest.param(datatype, binary, id=f"{datatype}-{'binary' if binary else 'json'}")
    for datatype in sorted(IDENTITY_TYPES)
    for binary in (True, False)
    if binary or datatype != "BF16"
]


@pytest.mark.parametrize(("datatype", "binary"), ROUND_TRIPS)
def test_every_data_type_round_trips(
    http: httpclient.InferenceServerClient, datatype: str, binary: bool
) -> None:
    shape = (2, 3) if datatype == "BYTES" else (2, 4)
    array = sample_array(datatype, shape, seed=5, extremes=datatype not in ("FP16", "FP32", "FP64"))
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = http.infer(
        identity_model(datatype),
        [http_input("INPUT0", array, datatype, binary)],
        outputs=[output],
    )
    received = result.as_numpy("OUTPUT0")
    if datatype == "BYTES":
        # JSON carries BYTES as text, which tritonclient.http hands back as str.
        got = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in received.ravel()]
        assert got == list(array.ravel())
    else:
        np.testing.assert_array_equal(bits(received.astype(array.dtype)), bits(array))
