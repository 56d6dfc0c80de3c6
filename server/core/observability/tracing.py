"""OpenTelemetry traces in Triton's shape: `InferRequest` > <model> > `compute`, per request.

Spans are made after the request finishes, from the timestamps it collected, so an untraced
request pays one counter check; export runs on a batch span processor's own thread and drops
spans rather than ever blocking a request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from server.contract.settings import TraceSettings

_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True, slots=True)
class TracedRequest:
    """What one finished request contributes to its spans (wall-clock nanoseconds)."""

    model: str
    version: int
    request_id: str
    start_ns: int  # the request arrived
    end_ns: int  # its answer was ready
    compute_start_ns: int | None = None  # None: it never executed
    compute_end_ns: int | None = None
    batch_size: int = 0
    instance: str = ""
    error: str = ""
    steps: tuple[TracedRequest, ...] = ()  # an ensemble's steps, each a span below its model


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
        root = self._tracer.start_span(
            "InferRequest", context=parent, kind=SpanKind.SERVER, start_time=request.start_ns
        )
        root.set_attributes(_attributes(request))
        self._model_span(request, trace.set_span_in_context(root))
        if request.error:
            root.set_status(Status(StatusCode.ERROR, request.error))
        root.end(end_time=request.end_ns)

    def _model_span(self, request: TracedRequest, context: Context) -> None:
        attributes = _attributes(request)
        model = self._tracer.start_span(
            request.model, context=context, start_time=request.start_ns, attributes=attributes
        )
        inner = trace.set_span_in_context(model)
        if request.compute_start_ns is not None and request.compute_end_ns is not None:
            compute = self._tracer.start_span(
                "compute",
                context=inner,
                start_time=request.compute_start_ns,
                attributes={
                    **attributes,
                    "convoy.batch_size": request.batch_size,
                    "convoy.instance": request.instance,
                },
            )
            compute.end(end_time=request.compute_end_ns)
        for step in request.steps:
            self._model_span(step, inner)
        if request.error:
            model.set_status(Status(StatusCode.ERROR, request.error))
        model.end(end_time=request.end_ns)

    def shutdown(self) -> None:
        self._provider.shutdown()  # flushes what is queued


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
