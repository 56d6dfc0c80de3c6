"""gRPC inference requests passed on as the bytes their clients sent (server.frontend.serialized):
a front-end worker's gRPC server takes the call (a unary ModelInfer, or each request of a
ModelStreamInfer), and the core decodes the request and encodes its answers, as it does for a
call it takes itself. The worker then parses, decodes and encodes nothing: its own work per
request is gRPC's. Used while no request is traced and no header is forwarded (both read the
call's metadata into the request); otherwise the worker decodes."""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import DecodeError

from proto import grpc_service_pb2 as pb
from server.contract.core import Core
from server.contract.errors import InvalidInputError, ServerError
from server.frontend.grpc.codec import decode_request
from server.frontend.grpc.encode import encode_response_bytes
from server.frontend.grpc.stream import stream_answers, stream_error
from server.frontend.serialized import SerializedAnswer

NOT_A_REQUEST = "the request is not a serialized inference.ModelInferRequest"


async def serve_serialized(
    core: Core, data: bytes | memoryview, deadline_ns: int, load_report: bool
) -> SerializedAnswer:
    """`SerializedInfer.infer_serialized` (server.frontend), served by `core` (the core
    process's side)."""
    request = parse_request(data)
    decoded = decode_request(request, deadline_ns, load_report=load_report)
    response = await core.infer(decoded)
    return SerializedAnswer(encode_response_bytes(response, request.id), response.load)


async def serve_serialized_stream(
    core: Core,
    data: bytes | memoryview,
    deadline_ns: int,
    load_format: str | None,
    put: Callable[[bytes, bool], object],
) -> None:
    """`SerializedInfer.infer_serialized_stream` (server.frontend), served by `core` (the core
    process's side): `put` gets each response serialized, with whether it is the request's
    last."""
    request = pb.ModelInferRequest()
    try:
        request = parse_request(data)
        decoded = decode_request(request, deadline_ns, load_report=load_format is not None)
    except ServerError as exc:
        put(stream_error(request, str(exc)).SerializeToString(), True)
        return

    def serialized(message: pb.ModelStreamInferResponse | bytes, final: bool) -> None:
        put(message if isinstance(message, bytes) else message.SerializeToString(), final)

    await stream_answers(core, request, decoded, serialized, load_format)


def parse_request(data: bytes | memoryview) -> pb.ModelInferRequest:
    """The ModelInferRequest in `data`; INVALID_ARGUMENT if it is not one (where grpc.aio,
    parsing it, would answer UNKNOWN)."""
    try:
        # upb parses any buffer; the stubs name bytes only.
        return pb.ModelInferRequest.FromString(data)  # type: ignore[arg-type]
    except DecodeError as exc:
        raise InvalidInputError(f"{NOT_A_REQUEST}: {exc}") from exc
