"""OpenTelemetry traces end to end: a real OTLP/gRPC receiver in the test, Convoy exporting to it.

Checks the span tree (InferRequest > model > compute), Triton's attribute names plus Convoy's
batch size and instance, and that a W3C traceparent continues the caller's trace.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, ensemble_config, infer_input, simple_inputs
from onnx import TensorProto
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from scripts import models

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


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


@pytest.fixture
def traced(
    start_server: StartServer,
    receiver: tuple[Receiver, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Receiver, str]]:
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
    server = start_server(
        repo,
        "--trace-config",
        "mode=opentelemetry",
        "--trace-config",
        "level=TIMESTAMPS",
        "--trace-config",
        "rate=2",
    )
    yield receiver[0], server.url


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


@contextlib.contextmanager
def _client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as opened:
        yield opened


def test_one_request_in_rate_is_traced_as_triton_shapes_it(traced: tuple[Receiver, str]) -> None:
    collector, url = traced
    with _client(url) as client:
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


def test_a_traceparent_continues_the_callers_trace(traced: tuple[Receiver, str]) -> None:
    collector, url = traced
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    with _client(url) as client:
        inputs, _, _ = simple_inputs(1)
        client.infer("simple", inputs, headers={"traceparent": traceparent})  # traced anyway
    spans = _wait_for_spans(collector, 3)
    root = next(s for s in spans if s.name == "InferRequest")
    assert root.trace_id.hex() == CALLER_TRACE
    assert root.parent_span_id.hex() == CALLER_SPAN
    assert {s.trace_id.hex() for s in spans} == {CALLER_TRACE}


def test_an_ensemble_request_has_one_span_per_step(traced: tuple[Receiver, str]) -> None:
    collector, url = traced
    traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    x = np.ones((1, 16), np.float32)
    with _client(url) as client:
        result = client.infer(
            "twice", [infer_input("IN", x, "FP32")], headers={"traceparent": traceparent}
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
    assert steps[0].end_time_unix_nano <= steps[1].start_time_unix_nano  # the second needs mid
