"""ModelStreamInfer's messages: each answer marked final or not (and carrying the model's load
when the stream asked for it), a request's failure in-band, and the `Outbox` that orders a
stream's answers for its one writer."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable

from proto import grpc_service_pb2 as pb
from server.contract.core import Core
from server.contract.errors import ServerError
from server.contract.requests import InferRequest
from server.contract.responses import InferResponse
from server.frontend.grpc.encode import encode_response, encode_stream_response_bytes
from server.frontend.orca import report_headers

_log = logging.getLogger(__name__)

# One answer of a stream: a message, or one already serialized (a front-end worker's, from the
# core); None ends the stream.
Answer = pb.ModelStreamInferResponse | bytes | None


def stream_error(request: pb.ModelInferRequest, message: str) -> pb.ModelStreamInferResponse:
    """A request's failure, in-band as Triton's: the stream goes on, and the id tells the client
    which request failed."""
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )


def _enables_empty_final(request: pb.ModelInferRequest) -> bool:
    parameter = request.parameters.get("triton_enable_empty_final_response")
    return parameter is not None and parameter.bool_param


def stream_message(
    request: pb.ModelInferRequest,
    item: InferResponse | ServerError | None,
    final: bool,
    load_format: str | None = None,
) -> pb.ModelStreamInferResponse | None:
    """One stream response, marked with whether it is its request's last; a decoupled
    model's final flag without a response is sent (empty) only if the request enables it,
    as Triton's. `load_format` (`orca.metadata_format`'s): a response with outputs carries the
    model's load in its `endpoint-load-metrics` parameter, the text of the unary call's header
    (a stream's trailing metadata comes only when it ends, too late for a balancer)."""
    if isinstance(item, ServerError):
        message = stream_error(request, str(item))
    else:
        message = pb.ModelStreamInferResponse()
        if item is not None:
            encode_response(item, request.id, message.infer_response)
            for key, report in report_headers(item.load, load_format):
                message.infer_response.parameters[key].string_param = report
        elif final and _enables_empty_final(request):
            answer = message.infer_response
            answer.model_name = request.model_name
            answer.model_version = request.model_version
            answer.id = request.id
        else:
            return None
    message.infer_response.parameters["triton_final_response"].bool_param = final
    return message


def _answer(
    request: pb.ModelInferRequest,
    item: InferResponse | ServerError | None,
    final: bool,
    load_format: str | None,
) -> pb.ModelStreamInferResponse | bytes | None:
    """`stream_message`, serialized at once where that is cheaper: a response without the
    load report is built as its bytes (`encode_stream_response_bytes`), as a unary call's is."""
    if load_format is None and isinstance(item, InferResponse):
        return encode_stream_response_bytes(item, request.id, final)
    return stream_message(request, item, final, load_format)


async def stream_answers(
    core: Core,
    request: pb.ModelInferRequest,
    decoded: InferRequest,
    put: Callable[[pb.ModelStreamInferResponse | bytes, bool], object],
    load_format: str | None = None,
) -> None:
    """Serve one stream request with `core`: `put` gets each of its responses (a message, or
    one serialized already) and whether it is the request's last; a failure in-band (and
    last), so that the stream goes on. (A callback, not an async generator: most requests
    answer once, and a generator's steps cost each.)"""
    try:
        outcome = await core.infer_streamed(decoded)
        if isinstance(outcome, InferResponse):  # the model answers once
            answer = _answer(request, outcome, True, load_format)
            assert answer is not None  # a response with outputs is always sent
            put(answer, True)
            return
        async for item, final in outcome:
            message = _answer(request, item, final, load_format)
            if message is not None:
                put(message, final)
        return
    except ServerError as exc:
        failed = stream_error(request, str(exc))
    except Exception as exc:  # one request's fault never ends the stream
        _log.exception("stream request '%s' failed unexpectedly", request.id)
        failed = stream_error(request, f"internal error: {exc}")
    put(failed, True)


class Outbox:
    """A stream's answers in the order they are ready, for its one writer; event-loop owned.

    What asyncio.Queue does for one consumer and no size bound, without its getter deque and
    loop checks on every call: measured at about 5% of a streaming server's GIL time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._items: collections.deque[Answer] = collections.deque()
        self._loop = loop  # the stream's: looking it up makes a system call under CPython 3.11
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Answer) -> None:
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> Answer:
        while not self._items:
            self._waiter = self._loop.create_future()
            await self._waiter
        return self._items.popleft()
