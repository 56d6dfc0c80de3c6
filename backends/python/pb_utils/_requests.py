"""`InferenceRequest`: one request as execute receives it, or one model code builds and runs on
another model (business logic scripting, through the worker's model caller)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._errors import TritonModelException
from ._responses import InferenceResponse, InferenceResponseSender, ResponseIterator, _running_loop
from ._tensor import Tensor
from ._types import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
)

# How `InferenceRequest.exec` reaches the server: installed by the worker (this package is the
# worker's, one per process, as Triton's is); None where no server is behind it (tests). The last
# argument says whether the caller asked for a decoupled call (then a ResponseIterator comes back).
ModelCaller = Callable[
    [str, int, list["Tensor"], list[str], dict[str, Any], bool],
    "InferenceResponse | ResponseIterator",
]
_model_caller: ModelCaller | None = None


def _install_model_caller(call: ModelCaller) -> None:
    global _model_caller
    _model_caller = call


class PreferredMemory:
    """Where a BLS call would like its outputs (Triton's `preferred_memory`): Convoy's python
    backend hands a model host arrays wherever they were computed, so every choice is met."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace, as a BLS call passes it on (`trace=request.trace()`)."""

    def get_context(self) -> str | None:
        """The trace's context to propagate; None: this request is not traced."""
        return None


class InferenceRequest:
    """One request as `execute` receives it, or one model code builds to `exec` on another
    model (business logic scripting)."""

    # Keyword-only: Triton's names, which model code passes by keyword.
    def __init__(
        self,
        *,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Iterable[Tensor] = (),
        requested_output_names: Iterable[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Mapping[str, Any] | str | None = None,
        response_sender: InferenceResponseSender | None = None,
        reschedulable: bool = False,
    ) -> None:
        # `preferred_memory` and `trace` are taken as Triton takes them and change nothing
        # here: outputs are host arrays, and a call has no trace of its own.
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = list(requested_output_names)
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        if isinstance(parameters, str):
            self._parameters = parameters
        else:
            self._parameters = json.dumps(dict(parameters)) if parameters else "{}"
        self._response_sender = response_sender
        self._new_sender: Callable[[], InferenceResponseSender] | None = None
        # Set by the server for a request of an iterative sequence model (never by model code).
        self._reschedulable = reschedulable
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def _received(
        cls,
        inputs: list[Tensor],
        requested_output_names: list[str],
        model_name: str,
        model_version: int,
        correlation_id: int | str,
        flags: int,
        parameters: str,
        new_sender: Callable[[], InferenceResponseSender],
        reschedulable: bool,
    ) -> InferenceRequest:
        """A request as execute receives it, built by the worker from what the server sent
        (nothing to convert or check), with no response sender until the model first asks for
        it: most models never do, and a batch builds one request per client request."""
        request = cls.__new__(cls)
        request._request_id = ""
        request._correlation_id = correlation_id
        request._inputs = inputs
        request._requested_output_names = requested_output_names
        request._model_name = model_name
        request._model_version = model_version
        request._flags = flags
        request._timeout = 0
        request._parameters = parameters
        request._response_sender = None
        request._new_sender = new_sender
        request._reschedulable = reschedulable
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        """In microseconds (0: none): a call made with it expires when it cannot finish in
        time, and is never executed after that."""
        return self._timeout

    def trace(self) -> InferenceTrace:
        return InferenceTrace()

    def parameters(self) -> str:
        """The request's parameters as a JSON object string."""
        return self._parameters

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:
            if self._new_sender is None:
                raise TritonModelException(
                    "this request was built in model code and has no response sender"
                )
            self._response_sender = self._new_sender()
        return self._response_sender

    def is_cancelled(self) -> bool:
        """Whether the request's caller cancelled it (see InferenceResponseSender)."""
        if self._response_sender is None and self._new_sender is None:
            return False  # built in model code: nobody to cancel it
        return self.get_response_sender().is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        """Triton's request release: TRITONSERVER_REQUEST_RELEASE_ALL (the default) ends the
        request with this execution; TRITONSERVER_REQUEST_RELEASE_RESCHEDULE runs it again in a
        later batch, for a model with sequence_batching { iterative_sequence: true } only. Set
        it before execute returns; a model that is not decoupled returns None for the request."""
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(
                f"release flags {flags}: expected TRITONSERVER_REQUEST_RELEASE_ALL or "
                "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE"
            )
        if flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE and not self._reschedulable:
            raise TritonModelException(
                "only a request that execute received, of a model with sequence_batching "
                "{ iterative_sequence: true }, can be rescheduled "
                "(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)"
            )
        self._release_flags = flags

    def release_flags(self) -> int:
        """What set_release_flags set (TRITONSERVER_REQUEST_RELEASE_ALL unless it was called)."""
        return self._release_flags

    def exec(self, decoupled: bool = False) -> Any:
        """Business logic scripting: run this request on another model of the server and wait
        for its response (an error response when the server refuses or the model fails); with
        `decoupled`, a ResponseIterator over the responses the model streams."""
        if not self._model_name:
            raise TritonModelException("exec() needs the request's model_name")
        if _model_caller is None:
            raise TritonModelException("exec() runs only inside a model served by Convoy")
        # A stateful model's sequence and the timeout travel as a client's request carries
        # them: in Triton's reserved parameters.
        parameters = json.loads(self._parameters)
        if self._correlation_id:
            parameters["sequence_id"] = self._correlation_id
            parameters["sequence_start"] = bool(
                self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            )
            parameters["sequence_end"] = bool(self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END)
        if self._timeout:
            parameters["timeout"] = self._timeout
        return _model_caller(
            self._model_name,
            self._model_version,
            self._inputs,
            self._requested_output_names,
            parameters,
            decoupled,
        )

    async def async_exec(self, decoupled: bool = False) -> Any:
        """`exec` without blocking the model's event loop (several may be awaited at once)."""
        return await _running_loop().run_in_executor(None, self.exec, decoupled)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input called `name`, or None when the request does not carry it."""
    for tensor in inference_request.inputs():  # a loop: a generator costs more per request
        if tensor.name() == name:
            return tensor
    return None
