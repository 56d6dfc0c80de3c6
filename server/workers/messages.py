"""The wire between a front-end worker and the core: every message kind, its descriptor layout,
and the encoding and decoding of both sides. Messages are tuples of plain values framed by
`server.workers.frames`; tensors travel as offsets into an arena (`server.workers.arena`): the
worker writes inputs into its input arena, the core writes outputs into the worker's output
arena. Each side allocates only in the arena it writes, and frees a block when the other side
says it is done with it.

An inference request of either protocol travels as its serialized request and answers instead
(INFER_SERIALIZED, STREAM_SERIALIZED, HTTP_SERIALIZED and SERIALIZED, placed as a tensor's bytes
are; server.frontend.serialized).

Tensor placements: `(ARENA, offset, nbytes)`, `(INLINE, bytes)` (tensors of up to
`INLINE_MAX_BYTES`, BYTES tensors, and any tensor when an arena is full), `(SHARED, location)` (an
input in a registered shared memory region, or an output the core wrote there: `(SHARED, None)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from server.contract.core import StreamItem
from server.contract.datatypes import BY_WIRE, DataType, decode_raw, encode_raw
from server.contract.errors import InternalError, ServerError, UnavailableError
from server.contract.load import LoadReport
from server.contract.model_io import TensorSpec
from server.contract.requests import (
    InferInput,
    InferOptions,
    InferRequest,
    Received,
    SequenceFlags,
)
from server.contract.responses import InferOutput, InferResponse
from server.frontend import SerializedAnswer
from server.workers.arena import Allocator, Arena
from server.workers.frames import Message

# Worker -> core.
INFER = "infer"  # (INFER, rid, stream, model, version, id, outputs, priority, timeout_us,
#                   deadline_ns, share, parameters, sequence, carrier, output_locations,
#                   classification, received, inputs, load_report)
# (INFER_SERIALIZED, rid, deadline_ns, load_report, kind, where, ...): a unary ModelInfer as
# its client sent it (server.frontend.grpc.forward), placed as a tensor is; one message per
# request, its answer SERIALIZED (or FAILED)
INFER_SERIALIZED = "infer serialized"
# (STREAM_SERIALIZED, rid, deadline_ns, load_format | None, kind, where, ...): one request of a
# ModelStreamInfer as its client sent it; its answers SERIALIZED, each with its final flag (and
# DONE when the last has nothing to send)
STREAM_SERIALIZED = "stream serialized"
# (HTTP_SERIALIZED, rid, model, version, header_length | None, load_report, kind, where, ...): an
# HTTP infer request's body as its client sent it; its answer SERIALIZED (or FAILED)
HTTP_SERIALIZED = "http serialized"
CANCEL = "cancel"  # (CANCEL, rid): the client went away
RELEASE = "release"  # (RELEASE, offsets): output blocks the worker is done with
CALL = "call"  # (CALL, cid, method, args): any other `Core` method (server.workers.calls)
READY = "ready"  # (READY, grpc_port, http_port): the worker serves
STOPPED = "stopped"  # (STOPPED,): the worker sends no request after this one
PONG = "pong"  # (PONG,): the answer to a PING, from the worker's event loop
# Core -> worker.
WELCOME = "welcome"  # (WELCOME, front-end settings, tracing, cuda_shm, serving, log settings)
ANSWER = "answer"  # (ANSWER, rid, final, model, version, outputs | None, parameters | None,
#                   load | None): outputs None, a final flag alone; parameters, the response
#                   parameters; load, the LoadReport's fields when the request asked for it
FAILED = "failed"  # (FAILED, rid, final, error class, message, in_band, retry_after_ms):
#                    in_band, one response of a stream failed; else the request failed as a
#                    whole (and final is True); retry_after_ms, an UnavailableError's or None
# (SERIALIZED, rid, final, load | None, header_length | None, kind, where, ...): the answer of
# any of the three, placed; header_length, an HTTP body's JSON header's (binary data)
SERIALIZED = "serialized"
DONE = "done"  # (DONE, rid): a stream ended without a final response
RESULT = "result"  # (RESULT, cid, value)
REFUSED = "refused"  # (REFUSED, cid, error class, message)
HEALTH = "health"  # (HEALTH, serving)
LOGS = "logs"  # (LOGS, settings): log settings changed through some worker
STOPPING = "stopping"  # (STOPPING,): the server stops; refuse new requests, answer STOPPED
PING = "ping"  # (PING,): the core's heartbeat; the worker's event loop answers PONG

ARENA, INLINE, SHARED = 0, 1, 2  # where a tensor's bytes are
# A tensor this small travels in its message: encoding it there costs 2.5-3.5 us against 6-7 us
# for an arena block's allocation, write, read and release (and the RELEASE message it needs),
# measured from 16 bytes to 8 KiB; at 64 KiB the arena is cheaper.
INLINE_MAX_BYTES = 8 * 1024

Placement = tuple[Any, ...]
Released = Callable[[int], None]  # frees one block of the arena the caller reads


def _error_classes(base: type[ServerError]) -> dict[str, type[ServerError]]:
    found = {base.__name__: base}
    for child in base.__subclasses__():
        found.update(_error_classes(child))
    return found


# Every contract error by name (they are all defined in server.contract.errors).
_ERRORS = _error_classes(ServerError)


def error_message(error: ServerError) -> tuple[str, str]:
    return type(error).__name__, str(error)


def error_of(name: str, message: str) -> ServerError:
    """The contract error a peer named (an unknown name: internal)."""
    return _ERRORS.get(name, InternalError)(message)


def failed_error(message: Message) -> ServerError:
    """The error of a FAILED message, with the retry hint it carries."""
    error = error_of(message[3], message[4])
    if isinstance(error, UnavailableError):
        error.retry_after_ms = message[6]
    return error


def encode_infer(
    rid: int, stream: bool, request: InferRequest, placements: Sequence[Placement]
) -> Message:
    """One request, its inputs placed (in order) by the worker."""
    options = request.options
    return (
        INFER,
        rid,
        stream,
        request.model,
        request.version,
        request.request_id,
        tuple(request.outputs),
        options.priority,
        options.timeout_us,
        options.deadline_ns,
        options.share,
        options.in_turn,
        dict(options.parameters),
        None
        if (sequence := options.sequence) is None
        else (sequence.id, sequence.start, sequence.end),
        None if request.carrier is None else dict(request.carrier),
        dict(request.output_locations),
        dict(request.classification),
        None
        if (received := request.received) is None
        else (received.protocol, received.start_ns, received.end_ns),
        tuple(
            (tensor.name, tensor.datatype, tensor.shape, *placement)
            for tensor, placement in zip(request.inputs, placements, strict=True)
        ),
        request.load_report,
    )


def decode_infer(message: Message, inputs: Arena) -> tuple[int, bool, InferRequest]:
    """(rid, stream, request) with arena inputs as views of `inputs` (no copy)."""
    (_, rid, stream, model, version, request_id, outputs, priority, timeout_us) = message[:9]
    deadline_ns, share, in_turn, parameters, sequence, carrier, locations = message[9:16]
    classification, received, tensors, load_report = message[16:]
    options = (
        InferOptions(
            priority,
            timeout_us,
            parameters,
            sequence=None if sequence is None else SequenceFlags(*sequence),
            deadline_ns=deadline_ns,
            share=share,
            in_turn=in_turn,
        )
        if priority or timeout_us or deadline_ns or share or parameters or sequence
        else _IN_TURN
        if in_turn
        else _NO_OPTIONS
    )
    decoded = [_decode_input(tensor, inputs) for tensor in tensors]
    request = InferRequest(
        model,
        version,
        decoded,
        outputs,
        options,
        request_id,
        carrier,
        locations,
        classification,
        None if received is None else Received(*received),
        load_report,
    )
    return rid, stream, request


def _decode_input(tensor: tuple[Any, ...], inputs: Arena) -> InferInput:
    # (name, wire, shape, kind, where, ...): every placement's first value says where.
    name, wire, shape, kind, where = tensor[:5]
    if kind == ARENA:
        return InferInput(name, wire, shape, inputs.array(where, BY_WIRE[wire].numpy, shape))
    if kind == INLINE:
        return InferInput(name, wire, shape, _inline(name, BY_WIRE[wire], shape, where))
    return InferInput(name, wire, shape, None, where)


def _inline(name: str, datatype: DataType, shape: tuple[int, ...], data: bytes) -> Any:
    """An inline tensor's array. The peer encoded it from an array of this shape (each side
    checked its client's tensors), so a fixed-size type is a view without checking again."""
    if datatype.wire == "BYTES":
        return decode_raw(name, datatype, shape, data)
    return np.frombuffer(data, dtype=datatype.numpy).reshape(shape)


_NO_OPTIONS = InferOptions()
_IN_TURN = InferOptions(in_turn=True)  # an HTTP request's, with no parameters


def encode_answer(
    rid: int, final: bool, response: InferResponse | None, placements: Sequence[Placement]
) -> Message:
    """One response (None: a final flag alone), its outputs placed (in order) by the core."""
    if response is None:
        return (ANSWER, rid, final, "", 0, None, None, None)
    outputs = tuple(
        [
            (output.spec.name, output.spec.datatype.wire, output.spec.dims, output.shape, *placed)
            for output, placed in zip(response.outputs, placements, strict=True)
        ]
    )
    parameters = None if response.parameters is None else dict(response.parameters)
    load = None if (r := response.load) is None else (r.queue_length, r.in_flight, r.load_ratio)
    return (ANSWER, rid, final, response.model, response.version, outputs, parameters, load)


def decode_answer(message: Message, outputs: Arena, release: Released) -> InferResponse | None:
    """The response with its outputs copied out of `outputs`, whose blocks are then released."""
    _, _, _, model, version, tensors, parameters, load = message
    if tensors is None:
        return None
    decoded = [_decode_output(t, outputs, release) for t in tensors]
    report = None if load is None else LoadReport(*load)
    return InferResponse(model, version, decoded, parameters, report)


def _decode_output(tensor: tuple[Any, ...], outputs: Arena, release: Released) -> InferOutput:
    # (name, wire, dims, shape, kind, where, ...): as `_decode_input`, the first value says where.
    name, wire, dims, shape, kind, where = tensor[:6]
    datatype = BY_WIRE[wire]
    spec = TensorSpec(name, datatype, dims, False)
    if kind == ARENA:
        array = outputs.array(where, datatype.numpy, shape).copy()
        release(where)
        return InferOutput(spec, shape, array)
    if kind == INLINE:
        return InferOutput(spec, shape, _inline(name, datatype, shape, where))
    return InferOutput(spec, shape, None)


def encode_infer_serialized(
    rid: int, deadline_ns: int, load_report: bool, placement: Placement
) -> Message:
    return (INFER_SERIALIZED, rid, deadline_ns, load_report, *placement)


def encode_http_serialized(
    rid: int,
    model: str,
    version: str,
    header_length: str | None,
    load_report: bool,
    placement: Placement,
) -> Message:
    return (HTTP_SERIALIZED, rid, model, version, header_length, load_report, *placement)


def encode_stream_serialized(
    rid: int, deadline_ns: int, load_format: str | None, placement: Placement
) -> Message:
    return (STREAM_SERIALIZED, rid, deadline_ns, load_format, *placement)


def encode_serialized(
    rid: int, answer: SerializedAnswer, placement: Placement, final: bool = True
) -> Message:
    """An INFER_SERIALIZED's or STREAM_SERIALIZED's answer, its bytes placed by the core
    (`place_bytes`)."""
    load = None if (r := answer.load) is None else (r.queue_length, r.in_flight, r.load_ratio)
    return (SERIALIZED, rid, final, load, answer.header_length, *placement)


def decode_serialized(message: Message, outputs: Arena, release: Released) -> SerializedAnswer:
    """A SERIALIZED answer, copied out of `outputs`, whose block is then released."""
    _, _, _, load, header_length, kind, where = message[:7]
    if kind == ARENA:
        data = bytes(outputs.view(where, message[7]))
        release(where)
    else:
        data = where
    return SerializedAnswer(data, None if load is None else LoadReport(*load), header_length)


def encode_failed(
    rid: int, error: ServerError, final: bool = True, in_band: bool = False
) -> Message:
    retry_after_ms = error.retry_after_ms if isinstance(error, UnavailableError) else None
    return (FAILED, rid, final, *error_message(error), in_band, retry_after_ms)


def stream_item(message: Message, outputs: Arena, release: Released) -> StreamItem:
    """An ANSWER or in-band FAILED message as a stream item."""
    if message[0] == FAILED:
        return failed_error(message), message[2]
    return decode_answer(message, outputs, release), message[2]


def place_bytes(data: bytes, arena: Arena, allocator: Allocator) -> Placement:
    """Where a serialized message goes, as `place` puts a tensor: into the arena where it is
    larger than `INLINE_MAX_BYTES` and there is room; else inline."""
    nbytes = len(data)
    if nbytes > INLINE_MAX_BYTES:
        offset = allocator.allocate(nbytes)
        if offset is not None:
            arena.write(offset, data)
            return (ARENA, offset, nbytes)
    return (INLINE, data)


def placed_bytes(placement: Sequence[Any], arena: Arena) -> bytes | memoryview:
    """The bytes `place_bytes` placed, as a view of `arena` (no copy) or inline."""
    kind, where = placement[:2]
    return arena.view(where, placement[2]) if kind == ARENA else where


def place(array: Any, datatype: DataType, arena: Arena, allocator: Allocator) -> Placement:
    """Where one tensor's bytes go, for the side that writes `arena` (and so allocates in it):
    into the arena, one copy, where there is room; else inline (BYTES tensors, and tensors of up
    to `INLINE_MAX_BYTES`, always)."""
    if (
        isinstance(array, np.ndarray)
        and not array.dtype.hasobject
        and array.nbytes > INLINE_MAX_BYTES
    ):
        contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)
        offset = allocator.allocate(contiguous.nbytes)
        if offset is not None:
            arena.write_array(offset, contiguous)
            return (ARENA, offset, contiguous.nbytes)
    return (INLINE, encode_raw(datatype, array))
