"""Limits and refusals of recent Triton releases, with Triton's status (and its words where a
client looks for them), over gRPC and HTTP, with the front end in the core process and in a
worker process: a forwarded header whose name Triton reserves (2.69), the 64 MB HTTP body limit
(2.58) and the cap on a chunked body's chunks (2.69), an output asked for twice (2.69), a tensor's
JSON nested too deep (2.58), model names that would leave the repository (2.62-2.66), and the
gRPC options Convoy accepts without an equivalent."""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, StartServer
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models

RESERVED = (
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout",
    "headers",
    "binary_data_output",
    "triton_enable_empty_final_response",
    "triton_anything",
)
DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024
TOO_LARGE = (
    f"Request size exceeds the maximum allowed value of {DEFAULT_MAX_INPUT_BYTES} bytes. Use "
    "--http-max-input-size to increase the limit."
)
TOO_DEEP = "JSON nesting depth exceeds maximum allowed limit (100)"
INVALID = {"grpc": "StatusCode.INVALID_ARGUMENT", "http": "400"}
ROW = list(range(16))


def _repository(root: Path) -> Path:
    repo = root / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    # A model beside the repository: no model name may reach it.
    models.write_model(root / "outside", "simple", models.simple(TensorProto.FLOAT), None)
    return repo


@pytest.fixture(scope="module", params=[0, 1], ids=["in-process", "workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("limits")
    flags = [
        "--frontend-workers",
        str(request.param),
        "--grpc-header-forward-pattern=.*",
        "--http-header-forward-pattern=.*",
        "--model-control-mode=explicit",
        "--load-model=simple",
        "--grpc-infer-thread-count=4",  # accepted, no effect
        "--grpc-max-response-pool-size=16",
    ]
    started = ConvoyServer(_repository(root), root / "server.log", *flags).start()
    try:
        yield started
        assert started.stop() == 0, started.log()
    finally:
        started.kill()


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


def _inputs(protocol: str) -> list[Any]:
    api = grpcclient if protocol == "grpc" else httpclient
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = api.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
        tensors.append(tensor)
    return tensors


def _refused(call: Any, *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as refused:
        call(*args, **kwargs)
    return refused.value


def test_a_forwarded_header_with_a_reserved_name_is_refused(protocol: str, client: Any) -> None:
    for name in RESERVED:
        error = _refused(client.infer, "simple", _inputs(protocol), headers={name: "1"})
        assert str(error.status()) == INVALID[protocol], name
        assert "reserved for Triton usage" in str(error.message()), error.message()
    # Any other header matching the pattern is forwarded, and the request served.
    answer = client.infer("simple", _inputs(protocol), headers={"x-tenant": "blue"})
    assert answer.as_numpy("OUTPUT0").ravel().tolist() == [2.0 * i for i in ROW]


def test_an_output_asked_for_twice_is_refused(protocol: str, client: Any) -> None:
    api = grpcclient if protocol == "grpc" else httpclient
    twice = [api.InferRequestedOutput("OUTPUT0"), api.InferRequestedOutput("OUTPUT0")]
    error = _refused(client.infer, "simple", _inputs(protocol), outputs=twice)
    assert str(error.status()) == INVALID[protocol]
    assert "requested more than once" in str(error.message())


def test_a_model_name_never_reaches_outside_the_repository(
    protocol: str, client: Any, server: ConvoyServer
) -> None:
    for name in ("../outside/simple", "..", ".", "a/b", "..\\outside", "/tmp"):
        _refused(client.load_model, name)
        _refused(client.unload_model, name)
        assert not client.is_model_ready(name)
    if protocol == "http":  # separators sent encoded reach the name check, and stop there
        for name in ("..%2Foutside%2Fsimple", "%2E%2E", "..%5Coutside"):
            url = f"http://127.0.0.1:{server.http_port}/v2/repository/models/{name}/load"
            request = urllib.request.Request(url, data=b"{}", method="POST")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 400
            assert "invalid model name" in json.loads(refused.value.read())["error"]
    config = json.dumps({"backend": "onnxruntime", "max_batch_size": 8})
    _refused(client.load_model, "../outside/simple", config=config)
    index = client.get_model_repository_index()
    names = [m["name"] for m in index] if protocol == "http" else [m.name for m in index.models]
    assert names == ["simple"]
    assert client.is_model_ready("simple")


def _post(server: ConvoyServer, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/simple/infer", data=body
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status), str(answer.read().decode())
    except urllib.error.HTTPError as error:
        return error.code, str(error.read().decode())


def _simple_request(padding: int = 0, data: object = ROW) -> bytes:
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [1, 16], "data": data}
        for name in ("INPUT0", "INPUT1")
    ]
    text = json.dumps({"inputs": inputs})
    return (text[:-1] + " " * padding + text[-1]).encode()  # spaces before the last brace


def _nested(depth: int) -> object:
    data: object = ROW
    for _ in range(depth - 1):
        data = [data]
    return data


def test_a_tensor_nested_deeper_than_tritons_limit_is_refused(server: ConvoyServer) -> None:
    status, text = _post(server, _simple_request(data=_nested(100)))
    assert status == 200, text
    assert json.loads(text)["outputs"][0]["data"] == [2.0 * i for i in ROW]
    status, text = _post(server, _simple_request(data=_nested(120)))
    assert (status, json.loads(text)["error"]) == (400, TOO_DEEP)
    # Nested past what the JSON parser itself takes: the same refusal, not an internal error.
    status, text = _post(server, b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert (status, json.loads(text)["error"]) == (400, TOO_DEEP)


def _chunked(server: ConvoyServer, body: bytes, chunks: int) -> tuple[int, str]:
    """POST `body` cut into `chunks` pieces (a chunked body), over a raw socket."""
    size = -(-len(body) // chunks)
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    assert len(pieces) == chunks
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    head = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=60) as sock:
        sock.sendall(head + framed)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode()


def test_a_chunked_body_of_more_than_65536_chunks_is_refused(server: ConvoyServer) -> None:
    bare = len(_simple_request())
    # One byte a chunk: the most chunks Triton takes, then one more.
    status, text = _chunked(server, _simple_request(padding=65536 - bare), 65536)
    assert status == 200, text
    status, text = _chunked(server, _simple_request(padding=65537 - bare), 65537)
    assert (status, json.loads(text)["error"]) == (
        400,
        "the chunked request body has more than 65536 chunks",
    )


BODY_65_MB = 65 * 1024 * 1024


def test_a_body_of_65_mb_is_refused_by_default(server: ConvoyServer) -> None:
    status, text = _post(server, _simple_request(padding=BODY_65_MB))
    assert (status, json.loads(text)["error"]) == (400, TOO_LARGE)


def test_a_body_of_65_mb_is_served_under_a_larger_limit(
    start_server: StartServer, tmp_path: Path
) -> None:
    larger = start_server(_repository(tmp_path), "--http-max-input-size=70000000")
    status, text = _post(larger, _simple_request(padding=BODY_65_MB))
    assert status == 200, text[:200]
    assert json.loads(text)["outputs"][0]["data"] == [2.0 * i for i in ROW]
