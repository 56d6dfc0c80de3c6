"""How the gRPC services are registered with grpc.aio: as generic handlers only.

The generated `add_*Servicer_to_server` functions also register each method by name. grpc.aio's
accept loop then keeps one pending request-call future per registered method (about 25 for the
inference, health and reflection services) and waits on all of them, with `asyncio.wait`, once
for every call it accepts: measured here, 26 us of the loop's time per call against 12 us with
the one generic future. Generic handlers resolve the method by a dictionary lookup instead. The
bare grpc.aio server of the benchmarks (scripts/canned_grpc.py) registers the same way, so that
both pay the same floor.

ModelInfer's handler is chosen per call from the load report its metadata asks for
(`endpoint-load-metrics-format`): grpc.aio builds the call's metadata once for this lookup, where
every `context.invocation_metadata()` builds it again (1.9 us per call here), so a unary request
that asks for no report never reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from proto import grpc_service_pb2 as pb
from server.frontend.orca import FORMAT_HEADER, FORMATS, metadata_format

_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# Inference takes its requests unparsed: the servicer parses them, or a front-end worker passes
# them on to the core as they came.
_UNPARSED = frozenset({"ModelInfer", "ModelStreamInfer"})
_INFER = "ModelInfer"  # its handler is chosen per call, by the load report asked for


class GenericOnly:
    """A server as the generated `add_*Servicer_to_server` functions see it: their generic
    handlers reach the server, their per-method registrations are dropped."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        """Dropped: the generic handler added beside them serves the same methods."""


def inference_handler(servicer: object, *, load_report: bool = True) -> grpc.GenericRpcHandler:
    """Triton's inference service as one generic handler over `servicer`'s methods, one per
    method of the service's descriptor. ModelInfer and ModelStreamInfer get their requests as
    the bytes the client sent (the servicer parses them, or a front-end worker passes them on
    to the core); an answer that comes already serialized is sent as it is. `load_report`:
    each ModelInfer call is given the load report's format its metadata asks for
    (`servicer.ModelInfer(request, context, form=...)`, `orca.metadata_format`'s)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in _SERVICE.methods:
        behaviour = getattr(servicer, method.name)
        parse: Callable[[bytes], Message] | None = message_factory.GetMessageClass(
            method.input_type
        ).FromString
        if method.name in _UNPARSED:
            parse = None  # grpc hands the handler each request's bytes as they came
        if method.client_streaming != method.server_streaming:  # none in Triton's service
            raise TypeError(f"{method.full_name}: half-streaming methods are not served")
        kind = (
            grpc.stream_stream_rpc_method_handler
            if method.client_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = kind(
            behaviour, request_deserializer=parse, response_serializer=_serialized
        )
    by_format = None
    if load_report:
        # Bound through the class's function, not the bound method: grpc.aio tells a coroutine
        # handler by its code, which a partial over a bound method hides (it would run the
        # handler on its thread pool).
        infer = getattr(type(servicer), _INFER)
        by_format = {
            form: grpc.unary_unary_rpc_method_handler(
                functools.partial(infer, servicer, form=form), response_serializer=_serialized
            )
            for form in (None, *FORMATS)
        }
    return _InferenceService(handlers, by_format)


class _InferenceService(grpc.GenericRpcHandler):
    """Each method's handler by its full name; ModelInfer's, where `by_format` is given, the one
    for the load report format its call's metadata asks for (None: no report)."""

    def __init__(
        self,
        handlers: Mapping[str, grpc.RpcMethodHandler],
        by_format: Mapping[str | None, grpc.RpcMethodHandler] | None,
    ) -> None:
        prefix = f"/{_SERVICE.full_name}/"
        self._handlers = {prefix + name: handler for name, handler in handlers.items()}
        self._infer = prefix + _INFER
        self._by_format = by_format

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if method != self._infer or self._by_format is None:
            return self._handlers.get(method)
        metadata = handler_call_details.invocation_metadata or ()
        for key, _ in metadata:  # a loop: almost every call asks for no report
            if key == FORMAT_HEADER:
                return self._by_format[metadata_format(metadata)]
        return self._by_format[None]


def _serialized(answer: Message | bytes) -> bytes:
    return answer if isinstance(answer, bytes) else answer.SerializeToString()
