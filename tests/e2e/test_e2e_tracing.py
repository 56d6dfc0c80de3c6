"""OpenTelemetry traces end to end: a real OTLP/gRPC receiver in the test, Convoy exporting to it.

Checks the span tree (InferRequest > model > compute), Triton's attribute names plus Convoy's
batch size and instance, that a W3C traceparent continues the caller's trace, and Triton's
timestamps as span events: the front end's receive stage on the root span (gRPC and HTTP, in the
core process and in a front-end worker), the request's on the model span and the execution's on
`compute`, in order and as long as the durations the statistics counted.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, StartServer, ensemble_config, infer_input, simple_inputs
from onnx import TensorProto
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from scripts import models

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
# Triton's timestamps, in the order they happen, and the span of the model's each one is on.
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
IN_ORDER = ["REQUEST_START", "QUEUE_START", *COMPUTE_EVENTS, "REQUEST_END"]
GRPC_RECEIVE = ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
HTTP_RECEIVE = ["HTTP_RECV_START", "HTTP_RECV_END"]


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Collects every span exported to it."""

    def __init__(self) -> None:
        self.spans: list[trace_pb2.Span] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    collector = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield collector, port
    server.stop(None)


def _serve_traced(
    start_server: StartServer,
    receiver: tuple[Receiver, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *flags: str,
) -> ConvoyServer:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    steps = [("IN", "mid", "simple"), ("mid", "OUT", "simple")]
    config = ensemble_config("twice", "TYPE_FP32", 16, steps)  # auto-completed simple batches 4
    models.write_model(
        repo, "twice", None, config.replace("max_batch_size: 8", "max_batch_size: 4")
    )
    (repo / "twice" / "1").mkdir()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver[1]}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    return start_server(
        repo,
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config",
        "level=TIMESTAMPS",
        "--trace-config",
        "rate=2",
        *flags,
    )


@pytest.fixture
def traced(
    start_server: StartServer,
    receiver: tuple[Receiver, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Receiver, ConvoyServer]:
    return receiver[0], _serve_traced(start_server, receiver, tmp_path, monkeypatch)


@pytest.fixture
def traced_by_a_worker(
    start_server: StartServer,
    receiver: tuple[Receiver, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Receiver, ConvoyServer]:
    """The same server with its front ends in one worker process."""
    flags = ("--frontend-workers", "1")
    return receiver[0], _serve_traced(start_server, receiver, tmp_path, monkeypatch, *flags)


def _wait_for_spans(collector: Receiver, count: int) -> list[trace_pb2.Span]:
    deadline = time.monotonic() + 10
    while len(collector.spans) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(collector.spans)


def _attributes(span: trace_pb2.Span) -> dict[str, object]:
    values: dict[str, object] = {}
    for attribute in span.attributes:
        kind = attribute.value.WhichOneof("value")
        values[attribute.key] = getattr(attribute.value, kind) if kind else None
    return values


def _events(span: trace_pb2.Span) -> dict[str, int]:
    """The span's events by name (wall-clock ns), after checking each name comes once."""
    names = [event.name for event in span.events]
    assert len(set(names)) == len(names), names
    return {event.name: event.time_unix_nano for event in span.events}


def _stamps(model: trace_pb2.Span, compute: trace_pb2.Span) -> dict[str, int]:
    """The seven timestamps of one executed request: each on its span as Triton puts it, in
    order, and the spans starting and ending at theirs."""
    assert [event.name for event in model.events] == MODEL_EVENTS
    assert [event.name for event in compute.events] == COMPUTE_EVENTS
    stamps = _events(model) | _events(compute)
    ordered = [stamps[name] for name in IN_ORDER]
    assert ordered == sorted(ordered), stamps
    assert model.start_time_unix_nano == stamps["REQUEST_START"]
    assert model.end_time_unix_nano == stamps["REQUEST_END"]
    assert compute.start_time_unix_nano == stamps["COMPUTE_START"]
    assert compute.end_time_unix_nano == stamps["COMPUTE_END"]
    return stamps


def _received(root: trace_pb2.Span, model: trace_pb2.Span, names: list[str]) -> None:
    """The front end's receive stage on the root span, before the core took the request."""
    assert [event.name for event in root.events] == names
    start_ns, end_ns = (_events(root)[name] for name in names)
    assert root.start_time_unix_nano <= start_ns <= end_ns <= model.start_time_unix_nano


def _request_spans(
    spans: list[trace_pb2.Span],
) -> tuple[trace_pb2.Span, trace_pb2.Span, trace_pb2.Span]:
    """The root, model and compute spans of a trace of one request to a plain model."""
    (root,) = [s for s in spans if s.name == "InferRequest"]
    (model,) = [s for s in spans if s.parent_span_id == root.span_id]
    (compute,) = [s for s in spans if s.parent_span_id == model.span_id]
    return root, model, compute


@contextlib.contextmanager
def _client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as opened:
        yield opened


def test_one_request_in_rate_is_traced_as_triton_shapes_it(
    traced: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced
    with _client(server.url) as client:
        for i in range(4):  # rate=2: two of these are traced
            inputs, a, b = simple_inputs(1, seed=i)
            result = client.infer("simple", inputs, request_id=f"req-{i}")
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    spans = _wait_for_spans(collector, 6)
    assert len(spans) == 6
    roots = [s for s in spans if s.name == "InferRequest"]
    assert len(roots) == 2
    for root in roots:
        assert root.kind == trace_pb2.Span.SPAN_KIND_SERVER
        model = next(s for s in spans if s.parent_span_id == root.span_id)
        compute = next(s for s in spans if s.parent_span_id == model.span_id)
        assert (model.name, compute.name) == ("simple", "compute")
        assert model.trace_id == compute.trace_id == root.trace_id
        assert root.start_time_unix_nano <= compute.start_time_unix_nano
        assert compute.end_time_unix_nano <= root.end_time_unix_nano
        attributes = _attributes(compute)
        assert attributes["triton.model_name"] == "simple"
        assert attributes["triton.model_version"] == 1
        assert str(attributes["triton.request_id"]).startswith("req-")
        assert attributes["convoy.batch_size"] == 1
        assert str(attributes["convoy.instance"]).startswith("simple_1_")
        _stamps(model, compute)
        _received(root, model, GRPC_RECEIVE)


def test_the_stages_last_as_long_as_the_statistics_counted(
    traced: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced
    with _client(server.url) as client:
        inputs, _, _ = simple_inputs(1)
        client.infer("simple", inputs, headers={"traceparent": TRACEPARENT})  # the only one
        stats = client.get_inference_statistics("simple").model_stats[0].inference_stats
    stamps = _stamps(*_request_spans(_wait_for_spans(collector, 3))[1:])
    assert stamps["COMPUTE_START"] - stamps["QUEUE_START"] == stats.queue.ns
    assert stamps["COMPUTE_INPUT_END"] - stamps["COMPUTE_START"] == stats.compute_input.ns
    assert stamps["COMPUTE_OUTPUT_START"] - stamps["COMPUTE_INPUT_END"] == stats.compute_infer.ns
    assert stamps["COMPUTE_END"] - stamps["COMPUTE_OUTPUT_START"] == stats.compute_output.ns
    assert stats.compute_infer.ns > 0


def test_an_http_request_has_the_http_receive_stage(
    traced: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced
    a = np.ones((1, 16), np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    url = f"127.0.0.1:{server.http_port}"
    with contextlib.closing(httpclient.InferenceServerClient(url)) as client:
        result = client.infer("simple", inputs, headers={"traceparent": TRACEPARENT})
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), 2 * a)
    root, model, compute = _request_spans(_wait_for_spans(collector, 3))
    _received(root, model, HTTP_RECEIVE)
    _stamps(model, compute)


def test_a_front_end_workers_receive_stage_is_on_the_cores_clock(
    traced_by_a_worker: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced_by_a_worker
    with _client(server.url) as client:
        inputs, _, _ = simple_inputs(1)
        client.infer("simple", inputs, headers={"traceparent": TRACEPARENT})
    root, model, compute = _request_spans(_wait_for_spans(collector, 3))
    _received(root, model, GRPC_RECEIVE)  # stamped in the worker, before the core had it
    _stamps(model, compute)


def test_a_traceparent_continues_the_callers_trace(
    traced: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced
    with _client(server.url) as client:
        inputs, _, _ = simple_inputs(1)
        client.infer("simple", inputs, headers={"traceparent": TRACEPARENT})  # traced anyway
    spans = _wait_for_spans(collector, 3)
    root = next(s for s in spans if s.name == "InferRequest")
    assert root.trace_id.hex() == CALLER_TRACE
    assert root.parent_span_id.hex() == CALLER_SPAN
    assert {s.trace_id.hex() for s in spans} == {CALLER_TRACE}


def test_an_ensemble_request_has_one_span_per_step(
    traced: tuple[Receiver, ConvoyServer],
) -> None:
    collector, server = traced
    x = np.ones((1, 16), np.float32)
    with _client(server.url) as client:
        result = client.infer(
            "twice", [infer_input("IN", x, "FP32")], headers={"traceparent": TRACEPARENT}
        )
    np.testing.assert_allclose(result.as_numpy("OUT"), 4 * x)  # (x + x), then doubled again
    spans = _wait_for_spans(collector, 6)
    root = next(s for s in spans if s.name == "InferRequest")
    ensemble = next(s for s in spans if s.parent_span_id == root.span_id)
    steps = [s for s in spans if s.parent_span_id == ensemble.span_id]
    assert ensemble.name == "twice"
    assert [s.name for s in steps] == ["simple", "simple"]
    for step in steps:
        (compute,) = [s for s in spans if s.parent_span_id == step.span_id]
        assert compute.name == "compute"
        assert ensemble.start_time_unix_nano <= step.start_time_unix_nano
        assert step.end_time_unix_nano <= ensemble.end_time_unix_nano
        _stamps(step, compute)
    assert steps[0].end_time_unix_nano <= steps[1].start_time_unix_nano  # the second needs mid
    # The ensemble has no compute of its own; its scheduler takes it up at its first step.
    assert [event.name for event in ensemble.events] == MODEL_EVENTS
    assert _events(ensemble)["QUEUE_START"] == min(s.start_time_unix_nano for s in steps)
    _received(root, ensemble, GRPC_RECEIVE)


def test_a_collector_that_never_answers_does_not_hold_the_stop(
    start_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spans still queued at a stop get tracing.FLUSH_S (5 s) to reach the collector; one
    that takes connections and never answers held the stop for the exporter's whole timeout
    before (10 s over OTLP/gRPC, 30 s over OTLP/HTTP with its retries)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        server = _serve_traced(
            start_server, (Receiver(), silent.getsockname()[1]), tmp_path, monkeypatch
        )
        with _client(server.url) as client:
            for _ in range(4):
                client.infer("simple", simple_inputs(1)[0])
        time.sleep(0.5)  # the batch processor's first export is under way, and waits
        started = time.monotonic()
        assert server.stop() == 0, server.log()
        assert time.monotonic() - started < 8.5  # FLUSH_S and the stop's own work
    assert "did not reach the collector" in server.log()
