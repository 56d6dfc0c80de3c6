"""Convoy's `triton_python_backend_utils`: the names a Triton model.py uses, as Triton has them.

The worker registers this module under Triton's name before it imports model.py. It imports
nothing from Convoy, so it runs the same in the worker process and in tests.
"""

from __future__ import annotations

import base64
import enum
import fcntl
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # imported where a running loop is asked for: see `_running_loop`
    import asyncio

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
# TRITONSERVER_MemoryType values, for `PreferredMemory`.
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# The worker attaches its handler (model and instance in every line) to this logger.
LOGGER_NAME = "triton_python_backend_utils"

# How `InferenceRequest.exec` reaches the server: installed by the worker (this module is the
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


# How custom metrics (`MetricFamily`) and the model loading API (`load_model`...) reach the
# server: installed by the worker, a function that takes one request (a dict of plain values)
# and whether its answer is awaited, and answers {"value": ...} or {"error": message} (anything
# when it is not awaited); None where no server is behind the module (tests).
ServerAsk = Callable[[dict[str, Any], bool], dict[str, Any]]
_server_ask: ServerAsk | None = None


def _install_server_ask(ask: ServerAsk) -> None:
    global _server_ask
    _server_ask = ask


# Where `shared_array` keeps this model version's arrays: installed by the worker (None: no server
# behind the module, so each call loads its own).
_shared_dir: str | None = None
_SHARED_KEY = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def _install_shared_dir(path: str | None) -> None:
    global _shared_dir
    _shared_dir = path


def shared_array(key: str, load: Callable[[], npt.ArrayLike]) -> npt.NDArray[Any]:
    """Convoy's addition, not Triton's: one read-only copy of a numeric array for every instance
    of this model version, each mapping the same shared memory pages.

    The first instance to ask for `key` runs `load()` and places what it returns in shared memory;
    the others, and an instance whose worker was restarted, map that copy and never call `load`.
    Call it from `initialize` for weights each instance would otherwise hold a copy of. `key`
    is letters, digits, `_`, `.` and `-`. Outside a Convoy server it returns `load()` itself."""
    if not _SHARED_KEY.fullmatch(key):
        raise TritonModelException(
            f"shared_array key {key!r} must be 1-200 letters, digits, '_', '.' or '-'"
        )
    if _shared_dir is None:
        return np.asarray(load())
    path = os.path.join(_shared_dir, f"{key}.npy")
    with open(os.path.join(_shared_dir, f"{key}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process loads; the others wait, then map it
        if not os.path.exists(path):
            array = np.asarray(load())
            if array.dtype.hasobject:
                raise TritonModelException(
                    f"shared_array {key!r}: only numeric arrays can be shared, not {array.dtype}"
                )
            partial = f"{path}.{os.getpid()}.partial"
            with open(partial, "wb") as out:
                np.save(out, array, allow_pickle=False)
            os.replace(partial, path)  # whole or absent, whoever looks
    shared: npt.NDArray[Any] = np.load(path, mmap_mode="r", allow_pickle=False)
    return shared


# Config type names -> NumPy types, as Triton spells them (TYPE_BOOL is Python's `bool` there).
TRITON_STRING_TO_NUMPY: Mapping[str, type] = MappingProxyType(
    {
        "TYPE_BOOL": bool,
        "TYPE_UINT8": np.uint8,
        "TYPE_UINT16": np.uint16,
        "TYPE_UINT32": np.uint32,
        "TYPE_UINT64": np.uint64,
        "TYPE_INT8": np.int8,
        "TYPE_INT16": np.int16,
        "TYPE_INT32": np.int32,
        "TYPE_INT64": np.int64,
        "TYPE_FP16": np.float16,
        "TYPE_FP32": np.float32,
        "TYPE_FP64": np.float64,
        "TYPE_STRING": np.object_,
    }
)

# TRITONSERVER_DataType values (the same numbers as the config's DataType) <-> NumPy types.
_TRITON_TO_NUMPY: Mapping[int, type[np.generic]] = MappingProxyType(
    {
        1: np.bool_,
        2: np.uint8,
        3: np.uint16,
        4: np.uint32,
        5: np.uint64,
        6: np.int8,
        7: np.int16,
        8: np.int32,
        9: np.int64,
        10: np.float16,
        11: np.float32,
        12: np.float64,
        13: np.object_,
    }
)
_NUMPY_TO_TRITON: Mapping[type[np.generic], int] = MappingProxyType(
    {**{numpy_type: code for code, numpy_type in _TRITON_TO_NUMPY.items()}, np.bytes_: 13}
)
# The same by native dtype, which an array's `dtype` is almost always: one lookup per tensor.
_DTYPE_TO_TRITON: Mapping[np.dtype[Any], int] = MappingProxyType(
    {np.dtype(numpy_type): code for numpy_type, code in _NUMPY_TO_TRITON.items()}
)


def triton_to_numpy_type(data_type: int) -> type[np.generic] | None:
    """The NumPy type of a Triton data type number (11 -> np.float32); None when unknown."""
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """The Triton data type number of a NumPy dtype or type (np.float32 -> 11); None when none."""
    try:
        return _NUMPY_TO_TRITON.get(np.dtype(data_type).type)
    except TypeError:
        return None


def triton_string_to_numpy(triton_type_string: str) -> type:
    """ "TYPE_FP32" -> np.float32; like Triton, only the full TYPE_ names (KeyError otherwise)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


class TritonModelException(Exception):
    """Raised by these utilities when a model uses them wrongly; a model may raise it too."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class TritonError:
    """The error of one response (not an exception: it travels inside an InferenceResponse)."""

    # TRITONSERVER_Error_Code values.
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class Tensor:
    """A named array on the CPU (Convoy's python backend never hands out device memory)."""

    def __init__(self, name: str, numpy_array: npt.ArrayLike) -> None:
        array = np.asarray(numpy_array)
        triton_dtype = _DTYPE_TO_TRITON.get(array.dtype)
        if triton_dtype is not None:  # the common case: a native numeric, bool or object dtype
            self._name, self._array, self._triton_dtype = name, array, triton_dtype
            return
        if array.dtype.kind in "UV":
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} is not supported by the python "
                "backend; use np.object_ (items bytes or str) for string tensors"
            )
        triton_dtype = numpy_to_triton_type(array.dtype)
        if triton_dtype is None:
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} has no Triton data type"
            )
        self._name = name
        self._array = array
        self._triton_dtype = triton_dtype

    @staticmethod
    def from_dlpack(name: str, dlpack_object: Any) -> Tensor:
        """A tensor over a DLPack producer (anything with `__dlpack__`) or a DLPack capsule.

        Host memory is shared, not copied. A producer on a device (a CUDA tensor of PyTorch or
        CuPy) is asked for a host copy, as DLPack 1.0 lets a consumer ask: Convoy's python
        backend keeps a model's tensors in host memory."""
        if not hasattr(dlpack_object, "__dlpack__"):
            try:
                return Tensor(name, np.from_dlpack(_Capsule(dlpack_object)))
            except BufferError as exc:
                raise TritonModelException(
                    f"tensor '{name}': {exc}; a DLPack capsule of device memory cannot be copied "
                    "to host memory here: pass the tensor itself (it has __dlpack__), which is "
                    "asked for a host copy"
                ) from None
        device_type, device_id = dlpack_object.__dlpack_device__()
        if device_type == _KDLCPU:
            return Tensor(name, np.from_dlpack(dlpack_object))
        try:
            return Tensor(name, np.from_dlpack(dlpack_object, device="cpu", copy=True))
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise TritonModelException(
                f"tensor '{name}' is on DLPack device ({device_type}, {device_id}), and its "
                f"producer could not copy it to host memory ({exc}); Convoy's python backend "
                "keeps tensors in host memory: pass a host array (for example tensor.cpu())"
            ) from None

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        return self._array

    def triton_dtype(self) -> int:
        return self._triton_dtype

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self._array.__dlpack_device__()
        return device


_KDLCPU = 1  # DLPack's device type for host memory


class _Capsule:
    """Lets NumPy consume a bare DLPack capsule, which it only takes through `__dlpack__`."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCPU, 0)


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


def _running_loop() -> asyncio.AbstractEventLoop:
    """The event loop an `async def` model method runs on. asyncio is imported here: whoever
    runs that loop has imported it already, and a worker of a model without one need not
    (it brings the `ssl` module, about 4 MiB a process)."""
    import asyncio

    return asyncio.get_running_loop()


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input called `name`, or None when the request does not carry it."""
    for tensor in inference_request.inputs():  # a loop: a generator costs more per request
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output called `name`, or None."""
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `input` entry called `name` of the model config dict (json.loads of the args)."""
    return next((i for i in model_config.get("input", ()) if i["name"] == name), None)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `output` entry called `name` of the model config dict."""
    return next((o for o in model_config.get("output", ()) if o["name"] == name), None)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy", {})
    return bool(policy.get("decoupled", False))


class ModelConfig:
    """The config `TritonPythonModel.auto_complete_config` receives and completes (Triton's
    names): a dict as `args['model_config']` holds it, changed through the methods below."""

    def __init__(self, model_config: Mapping[str, Any]) -> None:
        # A deep copy of plain data.
        self._config: dict[str, Any] = json.loads(json.dumps(dict(model_config)))

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current not in (0, max_batch_size):
            raise TritonModelException(
                f"max_batch_size is {current} in the config; auto_complete_config cannot set "
                f"{max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        scheduling = ("sequence_batching", "ensemble_scheduling")
        if any(self._config.get(key) for key in scheduling):
            raise TritonModelException("the config already has another scheduler")
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_input(self, input: Mapping[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: Mapping[str, Any]) -> None:
        self._add("output", output)

    def _add(self, side: str, tensor: Mapping[str, Any]) -> None:
        """Add a tensor, or check it against the one the config already declares."""
        missing = [key for key in ("name", "data_type", "dims") if key not in tensor]
        if missing:
            raise TritonModelException(f"{side} {dict(tensor)} lacks {missing}")
        declared = {t.get("name"): t for t in self._config.setdefault(side, [])}
        found = declared.get(tensor["name"])
        if found is None:
            entry = {**tensor, "dims": [int(d) for d in tensor["dims"]]}
            self._config[side].append(entry)
            return
        same_type = found.get("data_type") == tensor["data_type"]
        same_dims = [int(d) for d in found.get("dims", [])] == [int(d) for d in tensor["dims"]]
        if not (same_type and same_dims):
            raise TritonModelException(
                f"{side} '{tensor['name']}' is {tensor['data_type']} {list(tensor['dims'])} "
                f"here, but {found.get('data_type')} {found.get('dims')} in the config"
            )


class LogLevel(enum.Enum):
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Triton's model logger; lines go to the worker's stderr with the model and instance."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        _emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE)


def _emit(message: str, level: LogLevel) -> None:
    # stacklevel 3 names the line of model.py that called the Logger method.
    logging.getLogger(LOGGER_NAME).log(level.value, message, stacklevel=3)


class MetricFamily:
    """Triton's custom metrics: a family of Prometheus series the model updates, on the server's
    metrics page beside Triton's own. A family of the same name, kind and description created
    again (by another instance, or another model) is the same family."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(
                "MetricFamily: kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM"
            )
        self._name = name
        self._kind = kind
        _ask_server({"op": "family", "name": name, "description": description, "kind": kind})

    def Metric(  # Triton's name
        self, labels: Mapping[str, str] | None = None, buckets: Iterable[float] | None = None
    ) -> Metric:
        """The family's series with these labels (created when it is new); a histogram's needs
        its buckets' upper bounds, increasing."""
        return Metric(self._name, self._kind, dict(labels or {}), buckets)


class Metric:
    """One series of a MetricFamily (made by `MetricFamily.Metric`)."""

    def __init__(
        self,
        family: str,
        kind: str,
        labels: dict[str, str],
        buckets: Iterable[float] | None = None,
    ) -> None:
        self._family = family
        self._labels = labels
        self._target = {"family": family, "labels": labels}  # what each request names
        self._kind = kind
        bounds = None if buckets is None else [float(bound) for bound in buckets]
        _ask_server({"op": "metric", **self._target, "buckets": bounds})

    # Updates are checked here, so that a worker sends them without waiting for an answer.

    def increment(self, value: float) -> None:
        """Add `value` (a counter's must not be negative)."""
        amount = float(value)
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: a histogram only observes")
        if self._kind == MetricFamily.COUNTER and amount < 0:
            raise TritonModelException(f"{self._where()}: a counter cannot decrease")
        _update_metrics({"op": "increment", **self._target, "value": amount})

    def set(self, value: float) -> None:
        """A gauge's new value."""
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException(f"{self._where()}: only a gauge can be set")
        _update_metrics({"op": "set", **self._target, "value": float(value)})

    def observe(self, value: float) -> None:
        """One observation of a histogram."""
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: only a histogram observes")
        _update_metrics({"op": "observe", **self._target, "value": float(value)})

    def value(self) -> float:
        """A counter's or gauge's value now (what every instance added up)."""
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: a histogram has no value()")
        return float(_ask_server({"op": "value", **self._target}))

    def _where(self) -> str:
        labels = ", ".join(f"{k}={v!r}" for k, v in sorted(self._labels.items()))
        return f"metric '{self._family}'{{{labels}}}"


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """The model loading API: whether a model (a version of it, or its newest) serves."""
    request = {"op": "is_model_ready", "model": model_name, "version": str(model_version)}
    return bool(_ask_server(request))


def load_model(model_name: str, config: str = "", files: Mapping[str, bytes] | None = None) -> None:
    """The model loading API (the server in explicit model control mode): load a model, or load
    it again; `config` (JSON) replaces its config.pbtxt, and `files` ("file:<version>/<name>" ->
    bytes, with `config`) its directory. Returns once it serves; raises when it cannot."""
    encoded = {path: base64.b64encode(bytes(data)).decode() for path, data in (files or {}).items()}
    _ask_server({"op": "load_model", "model": model_name, "config": config, "files": encoded})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """The model loading API: unload a model (and, with `unload_dependents`, the ensembles
    that use it)."""
    request = {"op": "unload_model", "model": model_name, "dependents": unload_dependents}
    _ask_server(request)


def _ask_server(request: dict[str, Any]) -> Any:
    """The server's answer to a request, its error raised."""
    answer = _ask()(request, True)
    if "error" in answer:
        raise TritonModelException(str(answer["error"]))
    return answer.get("value")


def _update_metrics(request: dict[str, Any]) -> None:
    """An update the server carries out without answering (this module checked it)."""
    _ask()(request, False)


def _ask() -> ServerAsk:
    if _server_ask is None:
        raise TritonModelException("this works only inside a model that Convoy serves")
    return _server_ask
