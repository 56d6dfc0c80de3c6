"""An HTTP infer request passed on as the body its client sent: a front-end worker's HTTP server
takes the request, and the core decodes it and encodes its answer, as it does for a request it
takes itself (server.frontend.serialized). Used while no request is traced and no header is
forwarded (both read the request's headers into it); otherwise the worker decodes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from server.contract.core import Core
from server.contract.errors import InvalidInputError
from server.contract.requests import InferOptions, InferRequest, Received
from server.frontend.http.codec import (
    classification,
    decode_inputs,
    encode_response,
    infer_options,
    output_locations,
    requested_outputs,
    split_body,
)
from server.frontend.serialized import SerializedAnswer


def decode_request(
    model: str,
    version: str,
    body: bytes,
    header_length: str | None,
    *,
    load_report: bool = False,
    adjust: Callable[[InferOptions], InferOptions] | None = None,
    carrier: Mapping[str, str] | None = None,
    traced_since_ns: int | None = None,
) -> tuple[InferRequest, frozenset[str] | None]:
    """The engine's request from an infer request's body, and which outputs are to be answered
    as binary data. `adjust`: a change to its options (the headers forwarded to the model);
    `carrier`: its trace headers; `traced_since_ns`: when its decoding began (None: untraced)."""
    document, binary = split_body(body, header_length)
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidInputError(f"request 'id' must be a string, got {request_id!r:.80}")
    outputs, binary_outputs = requested_outputs(document)
    inputs = decode_inputs(document, binary, model)
    options = infer_options(document)
    if adjust is not None:
        options = adjust(options)
    request = InferRequest(
        model,
        version,
        inputs,
        outputs,
        options,
        request_id,
        carrier,
        output_locations(document),
        classification(document),
        None if traced_since_ns is None else Received("HTTP", traced_since_ns, time.monotonic_ns()),
        load_report=load_report,
    )
    return request, binary_outputs


async def answer(
    core: Core, request: InferRequest, binary_outputs: frozenset[str] | None
) -> SerializedAnswer:
    """`request` served by `core`, its answer's body encoded (binary outputs after the JSON)."""
    response = await core.infer(request)
    data, header_length = encode_response(response, request.request_id, binary_outputs)
    return SerializedAnswer(data, response.load, header_length)


async def serve_http(
    core: Core,
    model: str,
    version: str,
    body: bytes | memoryview,
    header_length: str | None,
    load_report: bool,
) -> SerializedAnswer:
    """`SerializedInfer.infer_http` (server.frontend), served by `core` (the core process's
    side)."""
    request, binary_outputs = decode_request(
        model, version, bytes(body), header_length, load_report=load_report
    )
    return await answer(core, request, binary_outputs)
