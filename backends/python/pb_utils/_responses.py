"""A request's responses: `InferenceResponse`, the sender a decoupled model streams them with,
and the iterator a decoupled BLS call reads them from."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._errors import TritonError, TritonModelException
from ._tensor import Tensor
from ._types import TRITONSERVER_RESPONSE_COMPLETE_FINAL

if TYPE_CHECKING:  # imported where a running loop is asked for: see `_running_loop`
    import asyncio


class InferenceResponse:
    """Outputs for one request, or the error that fails that request alone; `parameters` (a
    dict of bool, int or str values) reach the client as the response's parameters."""

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        tensors = [] if output_tensors is None else output_tensors
        if not isinstance(tensors, list | tuple):
            raise TritonModelException('"output_tensors" must be a list.')
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(f'"error" must be a TritonError, got {type(error).__name__}')
        self._tensors = list(tensors)
        self._error = error
        self._parameters = _response_parameters(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


def _response_parameters(parameters: object) -> str:
    """A response's parameters as a JSON object string, checked as Triton checks them."""
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect parameters to be a dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


class ResponseIterator:
    """The responses of a decoupled BLS call (`exec(decoupled=True)`), in the order the called
    model sends them; the last one carries the final flag (an empty response when the model sent
    the flag alone). `cancel()` cancels the call: the called model's `request.is_cancelled()`
    turns true, and iterating ends with an error response saying so."""

    def __init__(
        self,
        take: Callable[[], tuple[InferenceResponse, bool]],
        cancel: Callable[[], None],
    ) -> None:
        self._take = take  # the next response and whether it is the final one
        self._cancel = cancel
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        response, final = self._take()
        self._done = final
        return response

    def __aiter__(self) -> ResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._done:
            raise StopAsyncIteration
        response, final = await _running_loop().run_in_executor(None, self._take)
        self._done = final
        return response

    def cancel(self) -> None:
        """Cancel the call (nothing happens once its final response arrived)."""
        if not self._done:
            self._cancel()


class InferenceResponseSender:
    """Streams responses of one request (decoupled models); nothing may follow the final flag."""

    def __init__(
        self,
        on_send: Callable[[InferenceResponse | None, bool], None],
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self._on_send = on_send
        self._cancelled = cancelled  # asks the server whether the request's caller cancelled it
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException(
                "Unable to send response. Response sender has been closed "
                "(a response with TRITONSERVER_RESPONSE_COMPLETE_FINAL was already sent)."
            )
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException(
                f"flags must be 0 or TRITONSERVER_RESPONSE_COMPLETE_FINAL, got {flags}"
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is None and not final:
            raise TritonModelException(
                "Inference Response object is needed when the flags is not equal to "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() takes an InferenceResponse or None, got {type(response).__name__}"
            )
        self._on_send(response, final)
        self._closed = final

    def is_cancelled(self) -> bool:
        """Whether the request's caller cancelled it (a client's stream, a BLS caller's
        `cancel()`); false once the final response was sent."""
        return not self._closed and self._cancelled is not None and self._cancelled()


def _running_loop() -> asyncio.AbstractEventLoop:
    """The event loop an `async def` model method runs on. asyncio is imported here: whoever
    runs that loop has imported it already, and a worker of a model without one need not
    (it brings the `ssl` module, about 4 MiB a process)."""
    import asyncio

    return asyncio.get_running_loop()


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output called `name`, or None."""
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)
