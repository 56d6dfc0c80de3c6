"""OpenTelemetry traces in Triton's shape: `InferRequest` > <model> > `compute`, per request,
with Triton's timestamps as span events.

Spans are made after the request finishes, from the timestamps it collected, so an untraced
request pays one counter check; export runs on a batch span processor's own thread and drops
spans rather than ever blocking a request. At a stop the spans still queued get `FLUSH_S` to
reach the collector, and are dropped after it: a collector that does not answer (each export
waits out the exporter's own 10 s timeout) held a stopping server for 30 s before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from backends import on_daemon_thread
from server.contract.requests import Received
from server.contract.settings import TraceSettings

_log = logging.getLogger(__name__)
_PROPAGATOR = TraceContextTextMapPropagator()
FLUSH_S = 5.0  # at a stop, how long the queued spans may take to reach the collector
# Triton's names for the start and end of a front end's receive stage, by protocol.
_RECEIVE_EVENTS = {
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"),
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END"),
}
Event = tuple[str, int]  # (Triton's timestamp name, wall-clock ns)


@dataclass(frozen=True, slots=True)
class Compute:
    """One request's execution as Triton stamps it (wall-clock ns, in this order)."""

    start_ns: int  # COMPUTE_START
    input_end_ns: int  # COMPUTE_INPUT_END: its inputs were in the runtime
    output_start_ns: int  # COMPUTE_OUTPUT_START: the runtime was done; outputs being copied out
    end_ns: int  # COMPUTE_END


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """What one finished request contributes to its spans (wall-clock nanoseconds)."""

    model: str
    version: int
    request_id: str
    start_ns: int  # the request arrived (REQUEST_START)
    end_ns: int  # its answer was ready (REQUEST_END)
    queue_start_ns: int | None = None  # None: no scheduler took it (failed first, cache hit)
    compute: Compute | None = None  # None: it never executed
    batch_size: int = 0
    instance: str = ""
    error: str = ""
    steps: tuple[TracedRequest, ...] = ()  # an ensemble's steps, each a span below its model
    received: tuple[Event, ...] = ()  # its front end's receive stage, on the root span


def stages(
    span_ns: tuple[int, int], queue_ns: int, compute_ns: tuple[int, int, int]
) -> tuple[int, Compute]:
    """QUEUE_START and the COMPUTE_* timestamps of a request that ran within `span_ns` (its
    wall-clock start and end) and recorded these durations: `queue_ns`, and `compute_ns` (input,
    infer, output). The batcher and the backends measure durations, not times, so the stamps are
    laid back from the request's end; each is clamped to the span's start, so they stay in order.
    """
    start_ns, end_ns = span_ns
    input_ns, infer_ns, output_ns = compute_ns
    output_start_ns = max(start_ns, end_ns - output_ns)
    input_end_ns = max(start_ns, output_start_ns - infer_ns)
    compute_start_ns = max(start_ns, input_end_ns - input_ns)
    queue_start_ns = max(start_ns, compute_start_ns - queue_ns)
    return queue_start_ns, Compute(compute_start_ns, input_end_ns, output_start_ns, end_ns)


def receive_events(received: Received | None, wall_offset_ns: int) -> tuple[Event, ...]:
    """A front end's receive stage as Triton's root span events (`wall_offset_ns` turns its
    monotonic stamps into wall-clock ones); none for a request no front end stamped."""
    if received is None:
        return ()
    start, end = _RECEIVE_EVENTS[received.protocol]
    return (start, received.start_ns + wall_offset_ns), (end, received.end_ns + wall_offset_ns)


class RequestTracer:
    """Decides which requests are traced and turns them into spans."""

    def __init__(self, settings: TraceSettings, exporter: SpanExporter | None = None) -> None:
        self.settings = settings
        self._seen = 0
        self._left = settings.count
        resource = Resource.create({"service.name": "convoy", **settings.resource})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(
            BatchSpanProcessor(
                exporter or _exporter(settings),
                max_queue_size=settings.bsp.get("bsp_max_queue_size"),
                schedule_delay_millis=settings.bsp.get("bsp_schedule_delay"),
                max_export_batch_size=settings.bsp.get("bsp_max_export_batch_size"),
            )
        )
        self._tracer = self._provider.get_tracer("convoy")

    def wants(self, carrier: Mapping[str, str] | None) -> bool:
        """Whether to trace the next request: propagated ones always, else one in `rate`."""
        if carrier and "traceparent" in carrier:
            return True
        if self._left == 0 or self.settings.rate <= 0:
            return False
        self._seen += 1
        if self._seen % self.settings.rate:
            return False
        if self._left > 0:
            self._left -= 1
        return True

    def record(self, request: TracedRequest, carrier: Mapping[str, str] | None) -> None:
        parent = _PROPAGATOR.extract(carrier) if carrier else None
        start_ns = min([request.start_ns, *(ns for _, ns in request.received)])
        root = self._tracer.start_span(
            "InferRequest", context=parent, kind=SpanKind.SERVER, start_time=start_ns
        )
        root.set_attributes(_attributes(request))
        for name, ns in request.received:
            root.add_event(name, timestamp=ns)
        self._model_span(request, trace.set_span_in_context(root))
        if request.error:
            root.set_status(Status(StatusCode.ERROR, request.error))
        root.end(end_time=request.end_ns)

    def _model_span(self, request: TracedRequest, context: Context) -> None:
        attributes = _attributes(request)
        model = self._tracer.start_span(
            request.model, context=context, start_time=request.start_ns, attributes=attributes
        )
        # Triton's split: the request's timestamps on its model's span, the execution's on
        # `compute`.
        model.add_event("REQUEST_START", timestamp=request.start_ns)
        if request.queue_start_ns is not None:
            model.add_event("QUEUE_START", timestamp=request.queue_start_ns)
        inner = trace.set_span_in_context(model)
        if (stamps := request.compute) is not None:
            compute = self._tracer.start_span(
                "compute",
                context=inner,
                start_time=stamps.start_ns,
                attributes={
                    **attributes,
                    "convoy.batch_size": request.batch_size,
                    "convoy.instance": request.instance,
                },
            )
            compute.add_event("COMPUTE_START", timestamp=stamps.start_ns)
            compute.add_event("COMPUTE_INPUT_END", timestamp=stamps.input_end_ns)
            compute.add_event("COMPUTE_OUTPUT_START", timestamp=stamps.output_start_ns)
            compute.add_event("COMPUTE_END", timestamp=stamps.end_ns)
            compute.end(end_time=stamps.end_ns)
        for step in request.steps:
            self._model_span(step, inner)
        if request.error:
            model.set_status(Status(StatusCode.ERROR, request.error))
        model.add_event("REQUEST_END", timestamp=request.end_ns)
        model.end(end_time=request.end_ns)

    async def shutdown(self, timeout_s: float = FLUSH_S) -> None:
        """Export what is queued and stop, within `timeout_s`; what is left then is dropped,
        with a warning (the export's thread is a daemon's: the process does not wait for it)."""
        flush = on_daemon_thread(self._provider.shutdown, name="convoy-trace-flush")
        try:
            await asyncio.wait_for(flush, timeout_s)
        except TimeoutError:
            _log.warning(
                "tracing: the spans still queued did not reach the collector (%s) within "
                "%.0f s of the stop, and are dropped",
                self.settings.endpoint or "the OTEL_EXPORTER_OTLP_* endpoint",
                timeout_s,
            )


def _attributes(request: TracedRequest) -> dict[str, str | int]:
    return {
        "triton.model_name": request.model,
        "triton.model_version": request.version,
        "triton.request_id": request.request_id,
    }


def _exporter(settings: TraceSettings) -> SpanExporter:
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=settings.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=settings.endpoint)
