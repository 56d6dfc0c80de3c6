"""The load report for balancers: a request with `endpoint-load-metrics-format` (TEXT or JSON)
gets `endpoint-load-metrics` back, as gRPC trailing metadata or an HTTP header, and a stream
opened with it in each response's parameters, in process and through front-end workers; a
request without it gets none. The values are exact while a known number of requests is held in
a gated model beside the one asked."""

from __future__ import annotations

import json
import queue
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import (
    ConvoyServer,
    StartServer,
    infer_input,
    metric,
    place_python_models,
    wait_for,
)
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
    models.write_repeat_model(repo)
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


def _generate(server: ConvoyServer, form: str | None, stream: bool = False) -> dict[str, str]:
    """The generate extension on `simple` (a JSON object of its inputs), or with `stream` its
    `generate_stream` (one server-sent event): the headers."""
    inputs = _simple_inputs()
    body = json.dumps({f"INPUT{index}": array[0].tolist() for index, array in enumerate(inputs)})
    headers = {"Content-Type": "application/json"}
    if form is not None:
        headers[FORMAT] = form
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/simple/"
        + ("generate_stream" if stream else "generate"),
        data=body.encode(),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=20) as answer:
        text = answer.read().decode()
        answered = json.loads(text.removeprefix("data: ").strip() if stream else text)
        assert answered["OUTPUT0"] == (inputs[0] + inputs[1])[0].tolist()
        return {name.lower(): value for name, value in answer.headers.items()}


Streamed = queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]]


def _stream(
    server: ConvoyServer, form: str | None, model: str = "simple", count: int = 3
) -> list[tuple[bool, str | None]]:
    """`count` requests on one ModelStreamInfer stream opened (by tritonclient) with `form` in
    its metadata, to `simple` one after another (none in flight beside the one answered), or to
    `repeat` (one request of `count` responses then an empty final one): each response's (final
    flag, `endpoint-load-metrics` parameter), in order."""
    results: Streamed = queue.Queue()
    headers = None if form is None else {FORMAT: form}
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(lambda result, error: results.put((result, error)), headers=headers)
        if model == "simple":
            tensors = [
                infer_input(f"INPUT{index}", array, "FP32")
                for index, array in enumerate(_simple_inputs())
            ]
            reports = []
            for index in range(count):
                client.async_stream_infer("simple", tensors, request_id=str(index))
                reports.append(_streamed(results))
        else:
            counted = [infer_input("COUNT", np.array([[count]], np.int32), "INT32")]
            client.async_stream_infer("repeat", counted, enable_empty_final_response=True)
            reports = [_streamed(results) for _ in range(count + 1)]
        client.stop_stream()
    return reports


def _streamed(results: Streamed) -> tuple[bool, str | None]:
    """The next stream response's final flag and `endpoint-load-metrics` parameter."""
    result, error = results.get(timeout=20)
    assert error is None, error
    assert result is not None
    parameters = result.get_response().parameters
    report = parameters[REPORT].string_param if REPORT in parameters else None
    return parameters["triton_final_response"].bool_param, report


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
    # The format is looked for as the call's handler is chosen: either format, in any case;
    # a format this server does not write gets the plain answer.
    assert _grpc(server, "Json")[REPORT].startswith('JSON {"named_metrics":')
    assert REPORT not in _grpc(server, "xml")
    assert REPORT not in _http(server, None)
    assert REPORT not in _http(server, "xml")  # a format this server does not write
    assert _generate(server, "text")[REPORT].startswith(idle)
    assert REPORT not in _generate(server, None)
    assert _generate(server, "text", stream=True)[REPORT].startswith(idle)
    assert REPORT not in _generate(server, None, stream=True)


def test_a_stream_opened_with_the_header_reports_in_each_response(server: ConvoyServer) -> None:
    idle = "TEXT named_metrics.nv_inference_pending_request_count=0, "
    reports = _stream(server, "text")
    assert [final for final, _ in reports] == [True, True, True]
    assert all(report is not None and report.startswith(idle) for _, report in reports)
    assert _stream(server, None) == [(True, None)] * 3
    assert _stream(server, "bin") == [(True, None)] * 3  # ORCA's binary form: not written

    # A decoupled model: each response with outputs reports; its empty final one does not.
    reports = _stream(server, "JSON", "repeat", count=3)
    assert [final for final, _ in reports] == [False, False, False, True]
    assert reports[-1][1] is None
    for _, report in reports[:-1]:
        assert report is not None and report.startswith("JSON ")
        named = json.loads(report.removeprefix("JSON "))["named_metrics"]
        assert set(named) == set(HELD_JSON["named_metrics"])
        assert named["nv_inference_pending_request_count"] == 0


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
        wait_for(
            lambda: (
                metric(server.metrics(), "convoy_inference_inflight_requests", **labels) == HELD
            ),
            f"{HELD} requests in flight",
        )
        # `simple` is idle; the server's ratio is the gated model's 6 / 4.
        assert _grpc(server, "text")[REPORT] == HELD_TEXT
        assert _http(server, "text")[REPORT] == HELD_TEXT
        assert _generate(server, "Text")[REPORT] == HELD_TEXT
        assert _generate(server, "text", stream=True)[REPORT] == HELD_TEXT
        assert _stream(server, "text") == [(True, HELD_TEXT)] * 3
        streamed = _stream(server, "json", count=1)[0][1]
        for report in (_grpc(server, "json")[REPORT], _http(server, "JSON")[REPORT], streamed):
            assert report is not None
            assert report.startswith("JSON ")
            assert json.loads(report.removeprefix("JSON ")) == HELD_JSON
    finally:
        (tmp_path / "open").touch()
        for thread in threads:
            thread.join(timeout=30)
    assert len(answers) == HELD
