"""The load report for balancers: a request with `endpoint-load-metrics-format` (TEXT or JSON)
gets `endpoint-load-metrics` back, as gRPC trailing metadata or an HTTP header, in process and
through front-end workers; a request without it gets none. The values are exact while a known
number of requests is held in a gated model beside the one asked."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, StartServer, infer_input, metric, place_python_models
from tritonclient.grpc import service_pb2, service_pb2_grpc

from scripts import models
from scripts.gen_models import write_simple

HELD = 6  # requests held in the gated model: 1.5 x its capacity (one instance x 4)
HELD_TEXT = (
    "TEXT named_metrics.nv_inference_pending_request_count=0, "
    "named_metrics.convoy_inference_inflight_requests=0, named_metrics.convoy_load_ratio=1.5"
)
HELD_JSON = {
    "named_metrics": {
        "nv_inference_pending_request_count": 0,
        "convoy_inference_inflight_requests": 0,
        "convoy_load_ratio": 1.5,
    }
}
FORMAT, REPORT = "endpoint-load-metrics-format", "endpoint-load-metrics"


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "gated",
        models.GATED_MODEL,
        'name: "gated"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "dynamic_batching { }\n"
        f'parameters {{ key: "gate" value: {{ string_value: "{tmp_path / "open"}" }} }}\n',
    )
    write_simple(repo)
    return place_python_models(repo, "in-process")


def _simple_inputs() -> list[np.ndarray]:
    return [np.ones((1, 16), np.float32), np.full((1, 16), 2, np.float32)]


def _grpc(server: ConvoyServer, form: str | None) -> dict[str, str]:
    """ModelInfer on `simple` through tritonclient's gRPC stub: its trailing metadata."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    for index, array in enumerate(_simple_inputs()):
        tensor = request.inputs.add(name=f"INPUT{index}", datatype="FP32", shape=array.shape)
        tensor.contents.fp32_contents.extend(array.ravel().tolist())
    metadata = () if form is None else ((FORMAT, form),)
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response, call = stub.ModelInfer.with_call(request, metadata=metadata, timeout=20)
    assert [output.name for output in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    return dict(call.trailing_metadata())


def _http(server: ConvoyServer, form: str | None) -> dict[str, str]:
    """An HTTP infer on `simple`, its body made and read by tritonclient: the headers."""
    tensors = []
    for index, array in enumerate(_simple_inputs()):
        tensor = httpclient.InferInput(f"INPUT{index}", list(array.shape), "FP32")
        tensor.set_data_from_numpy(array, binary_data=False)
        tensors.append(tensor)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(tensors)
    headers = {"Content-Type": "application/json"}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(header_length)
    if form is not None:
        headers[FORMAT] = form
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/simple/infer",
        data=body,
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=20) as answer:
        length = answer.headers.get("Inference-Header-Content-Length")
        result = httpclient.InferenceServerClient.parse_response_body(
            answer.read(), header_length=None if length is None else int(length)
        )
        assert result.as_numpy("OUTPUT0") is not None
        return {name.lower(): value for name, value in answer.headers.items()}


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(params=["in process", "workers"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, start_server: StartServer
) -> Iterator[ConvoyServer]:
    flags = ("--frontend-workers", "2") if request.param == "workers" else ()
    yield start_server(_repository(tmp_path), *flags)
    (tmp_path / "open").touch()  # lets whatever is still held finish before the stop


def test_a_report_is_sent_only_when_asked(server: ConvoyServer) -> None:
    idle = "TEXT named_metrics.nv_inference_pending_request_count=0, "
    assert _grpc(server, "text")[REPORT].startswith(idle)
    assert _http(server, "TEXT")[REPORT].startswith(idle)
    assert REPORT not in _grpc(server, None)
    assert REPORT not in _http(server, None)
    assert REPORT not in _http(server, "xml")  # a format this server does not write


def test_the_report_holds_the_load_of_the_moment(server: ConvoyServer, tmp_path: Path) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    answers: list[np.ndarray] = []

    def send() -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            answers.append(client.infer("gated", [infer_input("X", x, "FP32")]).as_numpy("Y"))

    threads = [threading.Thread(target=send) for _ in range(HELD)]
    for thread in threads:
        thread.start()
    try:
        labels = {"model": "gated", "version": "1"}
        _wait_for(
            lambda: (
                metric(server.metrics(), "convoy_inference_inflight_requests", **labels) == HELD
            ),
            f"{HELD} requests in flight",
        )
        # `simple` is idle; the server's ratio is the gated model's 6 / 4.
        assert _grpc(server, "text")[REPORT] == HELD_TEXT
        assert _http(server, "text")[REPORT] == HELD_TEXT
        for report in (_grpc(server, "json")[REPORT], _http(server, "JSON")[REPORT]):
            assert report.startswith("JSON ")
            assert json.loads(report.removeprefix("JSON ")) == HELD_JSON
    finally:
        (tmp_path / "open").touch()
        for thread in threads:
            thread.join(timeout=30)
    assert len(answers) == HELD
