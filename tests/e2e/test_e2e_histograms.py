"""Triton's latency histograms after known traffic over gRPC and HTTP: the first-response
histogram on a plain and a decoupled model, the five phase histograms, buckets from each
config's `model_metrics` (else Triton's defaults), a config with bad buckets refused, and
`--metrics-config histogram_latencies` turning them on and off."""

from __future__ import annotations

import json
import queue
import re
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import StartServer, infer_input, metric, place_python_models

from scripts import models

# Sends each request's first response at once and the final flags 0.4 s later.
SLOW_FINAL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        senders = [request.get_response_sender() for request in requests]
        for sender in senders:
            out = pb_utils.Tensor("INDEX", np.array([[0]], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        time.sleep(0.4)
        for sender in senders:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

FIRST = "nv_inference_first_response_histogram_ms"
PHASES = (
    "nv_inference_request_duration_histogram_us",
    "nv_inference_queue_duration_histogram_us",
    "nv_inference_compute_input_duration_histogram_us",
    "nv_inference_compute_infer_duration_histogram_us",
    "nv_inference_compute_output_duration_histogram_us",
)
TRITON_QUEUE_BUCKETS = ["100", "1000", "5000", "10000", "50000", "+Inf"]


def _buckets(family: str, buckets: str) -> str:
    return (
        f'{{ metric_identifier {{ family: "{family}" }} '
        f"histogram_options {{ buckets: [ {buckets} ] }} }}"
    )


def _plain_config(name: str, controls: list[str]) -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        f"model_metrics {{ metric_control [ {', '.join(controls)} ] }}\n"
    )


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    plain = [
        _buckets(FIRST, "1, 5, 10000"),
        _buckets("nv_inference_request_duration_histogram_us", "250.5, 1e6"),
        _buckets("nv_custom_family", "1, 2"),  # not one of ours: ignored, as Triton does
    ]
    models.write_model(repo, "plain", models.simple(), _plain_config("plain", plain))
    bad = [_buckets(FIRST, "10, 5")]
    models.write_model(repo, "bad_buckets", models.simple(), _plain_config("bad_buckets", bad))
    models.write_python_model(
        repo,
        "stream",
        SLOW_FINAL,
        'name: "stream"\nbackend: "python"\nmax_batch_size: 8\n'
        "model_transaction_policy { decoupled: true }\n"
        'input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"model_metrics {{ metric_control [ {_buckets(FIRST, '250, 1000')} ] }}\n",
    )
    # A worker process: in process, a decoupled model's responses reach the stream only once
    # execute has returned.
    return place_python_models(repo, "process")


def _les(page: str, family: str, model: str) -> list[str]:
    pattern = rf'^{family}_bucket\{{le="([^"]+)",model="{model}",version="1"\}} '
    return re.findall(pattern, page, re.MULTILINE)


def _traffic(grpc_url: str, http_url: str) -> None:
    """Three unary gRPC and two HTTP requests to `plain`; to `stream`, two over a gRPC stream
    and one over HTTP's generate_stream."""
    inputs = [np.ones((1, 16), np.float32), np.ones((1, 16), np.float32)]
    with grpcclient.InferenceServerClient(grpc_url) as triton:
        for _ in range(3):
            triton.infer(
                "plain", [infer_input(f"INPUT{i}", a, "FP32") for i, a in enumerate(inputs)]
            )
        results: queue.Queue[object] = queue.Queue()
        triton.start_stream(callback=lambda result, error: results.put(error or result))
        for index in range(2):
            count = infer_input("COUNT", np.array([[1]], np.int32), "INT32")
            triton.async_stream_infer("stream", [count], request_id=str(index))
        for _ in range(2):
            assert isinstance(results.get(timeout=20), grpcclient.InferResult)
        triton.stop_stream()  # waits for the final flags
    with httpclient.InferenceServerClient(http_url) as http:
        for _ in range(2):
            tensors = []
            for i, array in enumerate(inputs):
                tensor = httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32")
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            http.infer("plain", tensors)
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/stream/generate_stream",
        data=json.dumps({"COUNT": 1}).encode(),
    )
    with urllib.request.urlopen(request, timeout=20) as answer:
        assert b"data: " in answer.read()


def test_histograms_have_the_configured_buckets_after_traffic(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(_repository(tmp_path), "--metrics-config", "histogram_latencies=true")
    _traffic(server.url, f"127.0.0.1:{server.http_port}")
    page = server.metrics()
    labels = {"model": "plain", "version": "1"}

    # The first response of a model that answers once: every request, in model_metrics' buckets.
    assert _les(page, FIRST, "plain") == ["1", "5", "10000", "+Inf"]
    assert metric(page, f"{FIRST}_count", **labels) == 5
    assert metric(page, f"{FIRST}_bucket", le="10000", **labels) == 5
    # Phases: the request histogram in its configured buckets, the others in Triton's defaults.
    assert _les(page, PHASES[0], "plain") == ["250.5", "1000000", "+Inf"]
    for family in PHASES:
        assert metric(page, f"{family}_count", **labels) == 5, family
    assert _les(page, PHASES[1], "plain") == TRITON_QUEUE_BUCKETS
    assert metric(page, f"{PHASES[0]}_sum", **labels) > 0

    # A decoupled model's first response comes before its final flag (0.4 s later).
    stream = {"model": "stream", "version": "1"}
    assert _les(page, FIRST, "stream") == ["250", "1000", "+Inf"]
    assert metric(page, f"{FIRST}_count", **stream) == 3
    # The first runs at once, its first response long before the final flag (the second may
    # queue behind it); a stream that ended at its final flag would be in le=1000.
    assert metric(page, f"{FIRST}_bucket", le="250", **stream) >= 1

    # Buckets that do not ascend fail the model's load with a message that says so.
    assert "bad_buckets" not in re.findall(r'model="([^"]+)"', page)
    assert "strictly ascending" in server.log()
    assert "nv_custom_family" in server.log()


def test_histogram_latencies_turns_the_histograms_on_and_off(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = _repository(tmp_path)
    for flags, triton, convoy in (
        ((), False, True),  # Triton's default: its histograms off; Convoy's own on
        (("--metrics-config", "histogram_latencies=false"), False, False),
    ):
        server = start_server(repo, *flags)
        _traffic(server.url, f"127.0.0.1:{server.http_port}")
        page = server.metrics()
        assert (f"{FIRST}_bucket" in page) is triton
        assert any(f"{family}_bucket" in page for family in PHASES) is triton
        assert ("convoy_inference_batch_size_bucket" in page) is convoy
        assert "nv_inference_request_success" in page  # the counters stay
        server.stop()
