"""How the gRPC services are registered with grpc.aio: as generic handlers only.

The generated `add_*Servicer_to_server` functions also register each method by name. grpc.aio's
accept loop then keeps one pending request-call future per registered method (about 25 for the
inference, health and reflection services) and waits on all of them, with `asyncio.wait`, once
for every call it accepts: measured here, 26 us of the loop's time per call against 12 us with
the one generic future. Generic handlers resolve the method by a dictionary lookup instead. The
bare grpc.aio server of the benchmarks (scripts/canned_grpc.py) registers the same way, so that
both pay the same floor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from proto import grpc_service_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# Inference takes its requests unparsed: the servicer parses them, or a front-end worker passes
# them on to the core as they came.
_UNPARSED = frozenset({"ModelInfer", "ModelStreamInfer"})


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


def inference_handler(servicer: object) -> grpc.GenericRpcHandler:
    """Triton's inference service as one generic handler over `servicer`'s methods, one per
    method of the service's descriptor. ModelInfer and ModelStreamInfer get their requests as
    the bytes the client sent (the servicer parses them, or a front-end worker passes them on
    to the core); an answer that comes already serialized is sent as it is."""
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
    return grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers)


def _serialized(answer: Message | bytes) -> bytes:
    return answer if isinstance(answer, bytes) else answer.SerializeToString()
