"""Triton's timestamps on a traced request's spans: the stages laid back from its end by the
durations it recorded, the front end's receive stage, and the events each span carries."""

import asyncio

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from server.contract.requests import Received
from server.contract.settings import TraceSettings
from server.core.observability.tracing import (
    Compute,
    RequestTracer,
    TracedRequest,
    receive_events,
    stages,
)


def test_stages_end_at_the_requests_end_and_keep_its_durations() -> None:
    queue_start_ns, compute = stages((1_000, 10_000), 2_000, (300, 4_000, 500))
    assert (queue_start_ns, compute) == (3_200, Compute(5_200, 5_500, 9_500, 10_000))
    assert compute.input_end_ns - compute.start_ns == 300
    assert compute.output_start_ns - compute.input_end_ns == 4_000
    assert compute.end_ns - compute.output_start_ns == 500
    assert compute.start_ns - queue_start_ns == 2_000


def test_stages_longer_than_the_request_are_clamped_to_its_start_in_order() -> None:
    queue_start_ns, compute = stages((1_000, 2_000), 5_000, (100, 1_500, 200))
    assert queue_start_ns == compute.start_ns == compute.input_end_ns == 1_000
    assert (compute.output_start_ns, compute.end_ns) == (1_800, 2_000)


def test_a_request_that_never_queued_or_computed_starts_its_stages_at_its_end() -> None:
    assert stages((1_000, 2_000), 0, (0, 0, 0)) == (2_000, Compute(2_000, 2_000, 2_000, 2_000))


def test_receive_events_carry_tritons_names_for_each_protocol_on_the_wall_clock() -> None:
    assert receive_events(Received("GRPC", 10, 25), 1_000) == (
        ("GRPC_WAITREAD_START", 1_010),
        ("GRPC_WAITREAD_END", 1_025),
    )
    assert receive_events(Received("HTTP", 10, 25), -5) == (
        ("HTTP_RECV_START", 5),
        ("HTTP_RECV_END", 20),
    )
    assert receive_events(None, 1_000) == ()


def _recorded(request: TracedRequest) -> dict[str, ReadableSpan]:
    exporter = InMemorySpanExporter()
    tracer = RequestTracer(TraceSettings(level="TIMESTAMPS", rate=1), exporter)
    tracer.record(request, None)
    asyncio.run(tracer.shutdown())
    return {span.name: span for span in exporter.get_finished_spans()}


def _events(span: ReadableSpan) -> list[tuple[str, int]]:
    return [(event.name, event.timestamp) for event in span.events]


def test_each_span_carries_the_events_triton_puts_on_it() -> None:
    queue_start_ns, compute = stages((1_000, 10_000), 2_000, (300, 4_000, 500))
    received = (("GRPC_WAITREAD_START", 600), ("GRPC_WAITREAD_END", 900))
    spans = _recorded(
        TracedRequest(
            "simple", 1, "id", 1_000, 10_000, queue_start_ns, compute, 1, "i0", received=received
        )
    )
    assert set(spans) == {"InferRequest", "simple", "compute"}
    root = spans["InferRequest"]
    assert _events(root) == list(received)
    assert (root.start_time, root.end_time) == (600, 10_000)  # from the front end's first stamp
    assert _events(spans["simple"]) == [
        ("REQUEST_START", 1_000),
        ("QUEUE_START", 3_200),
        ("REQUEST_END", 10_000),
    ]
    assert _events(spans["compute"]) == [
        ("COMPUTE_START", 5_200),
        ("COMPUTE_INPUT_END", 5_500),
        ("COMPUTE_OUTPUT_START", 9_500),
        ("COMPUTE_END", 10_000),
    ]
    assert (spans["compute"].start_time, spans["compute"].end_time) == (5_200, 10_000)


def test_a_request_that_never_executed_has_only_its_start_and_end() -> None:
    spans = _recorded(TracedRequest("simple", 0, "id", 1_000, 2_000, error="no such model"))
    assert set(spans) == {"InferRequest", "simple"}
    assert _events(spans["simple"]) == [("REQUEST_START", 1_000), ("REQUEST_END", 2_000)]
    assert _events(spans["InferRequest"]) == []
