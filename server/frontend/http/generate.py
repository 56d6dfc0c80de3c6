"""Triton's generate extension: a flat JSON object in (input name -> value or list, anything else
a request parameter), a flat JSON object out (output name -> value or list), as one JSON body
(`generate`) or as server-sent events (`generate_stream`)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from server.contract.core import Core, StreamItem
from server.contract.errors import (
    InternalError,
    InvalidInputError,
    ServerError,
    UnavailableError,
)
from server.contract.model_io import ModelIO
from server.contract.requests import (
    InferInput,
    InferOptions,
    InferRequest,
    ParameterValue,
    Received,
    model_parameters,
)
from server.contract.responses import InferResponse
from server.frontend.http.codec import (
    JsonObject,
    decode_json_data,
    json_data,
    parse_json,
    trace_carrier,
)
from server.frontend.http.messages import Request, Response, Streamed, json_response
from server.frontend.http.status import http_status_for
from server.frontend.orca import header_format, report_headers

# Keys of a generate answer that are not outputs (Triton's "reserved" names).
RESERVED = ("id", "model_name", "model_version")
_PARAMETER_TYPES = (str, int, float, bool)


def generate_inputs(
    body: JsonObject, io: ModelIO
) -> tuple[list[InferInput], str, dict[str, ParameterValue]]:
    """The input tensors a generate request names, its request id and its parameters.

    A key naming a model input becomes that tensor, shaped from the model's metadata shape: its
    fixed dimensions take their share of the values, the innermost variable one the rest, other
    variable ones 1 (so a scalar for `[-1, 1]` is `[1, 1]`). Every other key, and each member of
    `parameters`, is a request parameter, as in Triton (a Python model's `request.parameters()`
    shows them)."""
    request_id = body.get("id", "")
    if not isinstance(request_id, str):
        raise InvalidInputError(f"generate request 'id' must be a string, got {request_id!r:.80}")
    inputs = []
    parameters: list[tuple[str, Any]] = []
    for key, value in body.items():
        spec = io.inputs.get(key)
        if spec is None:
            if key == "parameters":
                _check_parameters(value)
                parameters.extend(value.items())
            elif key != "id":
                _check_parameter(key, value)
                parameters.append((key, value))
            continue
        where = f"generate input '{key}' of model '{io.model}'"
        count = _count(value)
        dims = (-1, *spec.dims) if io.max_batch_size > 0 else spec.dims
        shape = tensor_shape(dims, count)
        if shape is None:
            raise InvalidInputError(
                f"{where}: {count} value(s) cannot fill a tensor of shape {list(dims)}"
            )
        array = decode_json_data(value, spec.datatype, shape, where)
        inputs.append(InferInput(key, spec.datatype.wire, shape, array))
    return inputs, request_id, model_parameters(parameters)


def tensor_shape(dims: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """The shape that `count` values fill, with -1 dims sized as Triton's generate endpoint sizes
    them; None when the values cannot fill `dims`."""
    left = count
    for dim in dims:
        if dim != -1:
            if dim <= 0 or left % dim:
                return None
            left //= dim
    shape = list(dims)
    for index in reversed(range(len(shape))):
        if shape[index] == -1:
            shape[index], left = left, 1
    return tuple(shape) if left == 1 else None


def _count(value: Any) -> int:
    if isinstance(value, list):
        return sum(_count(item) for item in value)
    return 1


def _check_parameters(value: Any) -> None:
    if not isinstance(value, dict):
        raise InvalidInputError("generate request 'parameters' must be a JSON object")
    for key, item in value.items():
        _check_parameter(key, item)


def _check_parameter(key: str, value: Any) -> None:
    if not isinstance(value, _PARAMETER_TYPES):
        raise InvalidInputError(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or "
            f"'string' (or it is not an input of the model), got {value!r:.80}"
        )


def generate_answer(response: InferResponse, request_id: str) -> JsonObject:
    """The generate answer: model name and version, the id if given, then each output by name
    (a single value as itself, several as a flat list)."""
    answer: JsonObject = {"model_name": response.model, "model_version": str(response.version)}
    if request_id:
        answer["id"] = request_id
    for output in response.outputs:
        if output.array is None:
            continue
        values = json_data(output.spec.datatype, output.array)
        answer.setdefault(output.spec.name, values[0] if len(values) == 1 else values)
    return answer


def event(value: JsonObject) -> bytes:
    """One server-sent event carrying a JSON object."""
    return b"data: " + json.dumps(value).encode("utf-8") + b"\n\n"


class GenerateRoutes:
    """The `generate` and `generate_stream` handlers of every model (and version)."""

    def __init__(self, core: Core) -> None:
        self._core = core

    async def _request(self, request: Request, load_report: bool = False) -> InferRequest:
        """The engine's request; `load_report`: its response is to carry the model's load."""
        tracing = self._core.info.tracing
        started_ns = time.monotonic_ns() if tracing else 0
        name, version = request.match_info["model"], request.match_info.get("version", "")
        body = parse_json(request.body)
        io = await self._core.model_io(name, version)
        inputs, request_id, parameters = generate_inputs(body, io)
        options = InferOptions(parameters=parameters)
        return InferRequest(
            name,
            version,
            inputs,
            [],
            options,
            request_id,
            trace_carrier(request.headers) if tracing else None,
            received=Received("HTTP", started_ns, time.monotonic_ns()) if tracing else None,
            load_report=load_report,
        )

    async def generate(self, request: Request) -> Response:
        """One JSON answer; with `endpoint-load-metrics-format`, the model's load in the
        `endpoint-load-metrics` header, as `infer` answers."""
        form = header_format(request.headers)
        decoded = await self._request(request, load_report=form is not None)
        response = await self._core.infer(decoded)
        answer = json_response(generate_answer(response, decoded.request_id))
        return msgspec.structs.replace(answer, headers=report_headers(response.load, form))

    async def stream(self, request: Request) -> Streamed:
        """One event per response: a decoupled model's every response, any other model's one.
        A request the model failed is answered as an error event with the error's status
        (Triton's way); one refused before it ran, as a JSON error. With
        `endpoint-load-metrics-format`, the stream's headers carry the model's load when its
        first response was ready."""
        form = header_format(request.headers)
        decoded = await self._request(request, load_report=form is not None)
        request_id = decoded.request_id
        responses = self._core.infer_stream(decoded).__aiter__()
        headers: tuple[tuple[str, str], ...] = ()
        try:
            item: StreamItem = await anext(responses)
            first, status = item, 200
            if isinstance(item[0], InferResponse):
                headers = report_headers(item[0].load, form)
        except StopAsyncIteration:
            first, status = None, 200
        except (InternalError, UnavailableError) as exc:  # it failed to run, or was dropped
            first, status = (exc, True), http_status_for(exc)

        async def events() -> AsyncIterator[bytes]:
            try:
                if first is not None:
                    yield _event_of(first[0], request_id)
                    if status == 200 and not first[1]:
                        async for response, _ in responses:
                            yield _event_of(response, request_id)
            except ServerError as exc:  # mid-stream: in-band
                yield event({"error": str(exc)})
            finally:  # a client that left ends the request at once, not when it is collected
                aclose = getattr(responses, "aclose", None)
                if aclose is not None:
                    await aclose()

        return Streamed(status, "text/event-stream; charset=utf-8", events(), headers)


def _event_of(response: InferResponse | ServerError | None, request_id: str) -> bytes:
    if response is None:
        return b""  # a final flag alone sends nothing
    if isinstance(response, ServerError):
        return event({"error": str(response)})
    return event(generate_answer(response, request_id))
