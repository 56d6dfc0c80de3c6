"""The worker process of one python model instance, and the messages it exchanges.

Run by path (`python _worker.py SOCKET_FD IN_FD OUT_FD READY_FD ASK_FD`), so it imports nothing
from Convoy (`_frames.py`, the framing, is loaded by path too): model.py sees a clean interpreter
with Triton's `triton_python_backend_utils` and the version directory on sys.path. Messages are
pickled tuples whose arrays lie in shared memory (`_frames.py`): an execute message's inputs
reach the model there without a copy, writable, as Triton's inputs are.

Parent -> worker: ("auto_complete", spec), answered ("completed", config) | ("failed", reason),
after which the worker exits; or ("initialize", spec) once, then ("execute", batch, inputs,
output_names, parameters) or ("finalize",). Worker -> parent: ("ready", checks_readiness) |
("failed", reason) after initialize, `checks_readiness` saying whether the model defines
`is_ready`; ("response", batch, index, payload, final) for each send of a decoupled model,
then ("done", batch, payloads, execute_ns, rescheduled) or ("failed", batch, reason);
("finalized", error | None). `rescheduled` lists the requests (indexes) an iterative sequence's
model rescheduled, to run again in a later batch: they answer nothing now (their payloads are
None), and a decoupled model sends their final flags in a later batch.
A payload is a dict of output arrays, a pair (that dict, the response parameters as a JSON
object string) when the model set any, an error message (str), or None (a bare final flag).
While execute runs, the model's questions go to the parent, which answers each with ("called",
call, ...): `InferenceRequest.exec` sends ("call", batch, call, model, version, inputs,
output_names, parameters, decoupled), answered with a payload (whose pair carries the called
model's response parameters) or, for a decoupled call, True (or the error); then each ("next",
batch, call) is answered (payload, final) and ("cancel", batch, call) ends the call.
In process, `request.is_cancelled()` sends ("is_cancelled", batch, call, index), answered with a
bool; a worker asks on a socket of its own (`ASK_FD`, `Asks`), from any thread at any time:
ASK_CANCEL then (batch, index) as CANCEL_CHECK, answered b"1" or b"0"; ASK_SERVER then a request
of custom metrics (`pb_utils.MetricFamily`) or of the model loading API (`pb_utils.load_model`)
as LENGTH-prefixed JSON, answered the same way; or ASK_UPDATE then a metric's update (increment,
set, observe) the same way, not answered.

A socket of their own (`READY_FD`) carries readiness checks, so that one runs while a batch
executes: the parent sends one byte, a thread of the worker calls the model's `is_ready()` and
answers b"1" (ready) or b"0".
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import inspect
import itertools
import json
import logging
import os
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # imported when a model needs an event loop: see `_new_event_loop`
    import asyncio

UTILS_MODULE = "triton_python_backend_utils"
_MODEL_MODULE = "model"
_FRAMES_MODULE = "convoy_python_frames"
_PARENT_CHECK_S = 1.0  # how often an orphaned worker notices that the server is gone
# The questions on the asks socket, each a tag byte and its body (see the module's docs).
ASK_CANCEL, ASK_SERVER, ASK_UPDATE = b"c", b"m", b"u"
CANCEL_CHECK = struct.Struct("!qq")  # an is_cancelled() question: (batch, request index)
LENGTH = struct.Struct("!I")  # an ASK_SERVER or ASK_UPDATE request's (or answer's) JSON length
# The largest request a worker may send (its JSON; a model sent as files to `pb_utils.load_model`
# travels in it, base64-encoded): a model's bytes are not the server's memory to spend, and the
# server stops answering a worker that announces a larger one.
LARGEST_ASK_BYTES = 1 << 30

Payload = dict[str, np.ndarray] | tuple[dict[str, np.ndarray], str] | str | None


class ContractError(Exception):
    """The model broke the python backend's contract (wrong return value, not a Tensor...)."""


class Channel(Protocol):
    """How a `ModelServer` talks with the server: a socket in a worker process, or calls in the
    server's own process (`_local.py`)."""

    def send(self, message: object) -> None: ...

    def receive(self) -> Any: ...


class ModelServer:
    """Runs one TritonPythonModel: builds Triton's request objects, converts its responses.

    `copy_outputs`: answer copies of the model's output arrays (in the server's process, where
    nothing else copies them and the model may reuse its buffers, and where any thread's
    question to the server is answered on the spot); a worker's are copied into shared memory as
    they are sent, and its model asks the server only while execute runs."""

    def __init__(
        self,
        channel: Channel,
        utils: ModuleType,
        model: Any,
        spec: dict[str, Any],
        copy_outputs: bool = False,
        asks: Asks | None = None,
        answer: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
    ) -> None:
        self._channel = channel
        self._copy_outputs = copy_outputs
        # In process: each question answered on the asking thread (None: through the channel).
        self._answer = answer
        self._utils = utils
        self._model = model
        self._decoupled: bool = spec["decoupled"]
        self._iterative: bool = spec["iterative"]  # requests may be rescheduled
        self._model_name: str = spec["model_name"]
        self._version: int = spec["version"]
        self._loop: asyncio.AbstractEventLoop | None = None  # for `async def execute` models
        # For `async def is_ready`: its own loop, since it runs beside execute on another thread.
        self._readiness_loop: asyncio.AbstractEventLoop | None = None
        self._batch: int | None = None  # the batch whose execute runs now (calls belong to it)
        self._calls = itertools.count()
        # Questions in a worker: several threads may wait for answers at once (a model's
        # `async_exec` calls run side by side); one of them at a time reads the channel and
        # hands each answer to its asker.
        self._questions = threading.Condition()
        self._answers: dict[int, tuple[Any, ...]] = {}
        self._reading = False  # a waiting asker reads the channel now
        self._asking = 0  # questions sent and not yet answered
        # A worker's is_cancelled() questions' own socket (None in process: they go as calls).
        self._asks = asks
        utils._install_model_caller(self._call_model)

    def serve(self) -> None:
        while True:
            try:
                message = self._channel.receive()
            except EOFError:
                return  # the server went away without unloading: nothing to answer
            if message[0] == "execute":
                self.execute(*message[1:])
            elif message[0] == "finalize":
                self._channel.send(("finalized", self.finalize()))
                return

    def execute(
        self,
        batch: int,
        inputs: list[dict[str, np.ndarray]],
        output_names: list[str],
        parameters: list[dict[str, Any]],  # one per request; [] when no request has any
    ) -> None:
        pb = self._utils
        received = pb.InferenceRequest._received
        tensor = pb.Tensor
        requests = []
        # Per request: its final flag was sent; it was rescheduled and execute returned (its
        # sender is then closed: the next execution's request sends its responses).
        finals, moved_on = [False] * len(inputs), [False] * len(inputs)
        for index, arrays in enumerate(inputs):
            # A sequence batcher passes the correlation id, and the START and END flags where
            # set, under Triton's reserved names.
            own = parameters[index] if parameters else None  # none: no request carries any
            correlation_id, flags = 0, 0
            if own:  # most requests carry none
                own = dict(own)
                correlation_id = own.pop("sequence_id", 0)
                if own.pop("sequence_start", False):
                    flags |= pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
                if own.pop("sequence_end", False):
                    flags |= pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
            requests.append(
                received(
                    [tensor(name, _writable(array)) for name, array in arrays.items()],
                    list(output_names),
                    self._model_name,
                    self._version,
                    correlation_id,
                    flags,
                    json.dumps(own) if own else "{}",
                    functools.partial(self._response_sender, batch, index, finals, moved_on),
                    self._iterative,
                )
            )
        start_ns = time.monotonic_ns()
        self._batch = batch
        try:
            returned = self._model.execute(requests)
            if inspect.isawaitable(returned):
                returned = self._event_loop().run_until_complete(returned)
        except Exception as exc:
            _log().error("execute raised\n%s", traceback.format_exc())
            self._channel.send(("failed", batch, f"execute raised {_describe(exc)}"))
            return
        finally:
            with self._questions:  # in a worker, questions of other threads are answered first
                while self._asking and self._answer is None:
                    self._questions.wait()
                self._batch = None
        execute_ns = time.monotonic_ns() - start_ns
        rescheduled = []
        for index, request in enumerate(requests if self._iterative else ()):
            if request.release_flags() & pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                moved_on[index] = True
                if not finals[index]:  # a request that sent its final flag has ended
                    rescheduled.append(index)
        try:
            payloads = self._returned(returned, len(requests), rescheduled)
        except ContractError as exc:
            self._channel.send(("failed", batch, str(exc)))
            return
        self._channel.send(("done", batch, payloads, execute_ns, rescheduled))

    def _returned(self, returned: Any, count: int, rescheduled: list[int]) -> list[Payload] | None:
        if self._decoupled:
            if returned is not None:
                raise ContractError(
                    "the model is decoupled, so execute must return None and send responses "
                    f"with request.get_response_sender(); it returned {type(returned).__name__}"
                )
            return None
        if not isinstance(returned, list | tuple):
            hint = (
                " (a model that sends through request.get_response_sender() must be decoupled: "
                "model_transaction_policy { decoupled: true })"
                if returned is None
                else ""
            )
            raise ContractError(
                "execute must return a list of pb_utils.InferenceResponse, one per request; "
                f"it returned {type(returned).__name__}{hint}"
            )
        if len(returned) != count:
            raise ContractError(
                f"execute must return one InferenceResponse per request: it got {count} "
                f"requests and returned {len(returned)} responses"
            )
        payloads: list[Payload] = []
        moved = set(rescheduled)
        for index, response in enumerate(returned):
            if index not in moved:
                payloads.append(self._payload(response))
            elif response is None:
                payloads.append(None)
            else:
                raise ContractError(
                    f"request {index} was rescheduled (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE), "
                    f"so its entry in execute's list must be None, not {type(response).__name__}"
                )
        return payloads

    def _call_model(
        self,
        model: str,
        version: int,
        inputs: list[Any],
        output_names: list[str],
        parameters: dict[str, Any],
        decoupled: bool = False,
    ) -> Any:
        """`InferenceRequest.exec`: the request goes to the server, which runs it on `model`;
        a decoupled call answers a ResponseIterator that asks the server for each response."""
        pb = self._utils
        batch = self._batch
        if batch is None:
            raise pb.TritonModelException("exec() can be called only while execute() runs")
        arrays = {tensor.name(): _wire_array(tensor.as_numpy()) for tensor in inputs}
        names = list(output_names)
        call, reply = self._ask(
            "call", batch, None, model, version, arrays, names, parameters, decoupled
        )
        if not decoupled or isinstance(reply[2], str):
            return self._response(reply[2])

        def take() -> tuple[Any, bool]:
            answer = self._ask("next", batch, call)[1]
            return self._response(answer[2]), bool(answer[3])

        def cancel() -> None:
            self._ask("cancel", batch, call)

        return pb.ResponseIterator(take, cancel)

    def _response_sender(
        self, batch: int, index: int, finals: list[bool], moved_on: list[bool]
    ) -> Any:
        """Request `index` of `batch`'s InferenceResponseSender, made when the model asks."""
        return self._utils.InferenceResponseSender(
            self._sender(batch, index, finals, moved_on), self._cancel_check(batch, index)
        )

    def _cancel_check(self, batch: int, index: int) -> Callable[[], bool]:
        """`request.is_cancelled()` of request `index` of `batch`: the server knows."""

        def cancelled() -> bool:
            if not self._decoupled:
                return False  # only a decoupled model's request has a stream its caller can leave
            if self._asks is not None:  # any thread, any time: the question has its own socket
                return self._asks.cancelled(batch, index)
            return bool(self._ask("is_cancelled", batch, None, index)[1][2])

        return cancelled

    def _ask(
        self, kind: str, batch: int, call: int | None, *rest: Any
    ) -> tuple[int, tuple[Any, ...]]:
        """Send (kind, batch, call, *rest) to the server and wait for its ("called", call, ...)
        answer; `call` None: a new call number. Any number of threads may ask at once."""
        with self._questions:
            if batch != self._batch and self._answer is None:
                # In a worker the main thread reads the channel again once execute returned: an
                # answer could go to it. In process every question is answered on the spot.
                raise self._utils.TritonModelException(
                    f"{kind}: a model in a worker process asks the server only while execute() runs"
                )
            number = next(self._calls) if call is None else call
            self._asking += 1
        try:
            question = (kind, batch, number, *rest)
            if self._answer is not None:
                reply = self._answer(question)
            else:
                self._channel.send(question)
                reply = self._answer_to(number)
        finally:
            with self._questions:
                self._asking -= 1
                self._questions.notify_all()
        if reply[0] != "called" or reply[1] != number:
            raise self._utils.TritonModelException(
                f"{kind}: unexpected reply {reply[0]!r} from the server"
            )
        return number, reply

    def _answer_to(self, number: int) -> tuple[Any, ...]:
        """The server's answer to question `number`: read from the channel by this thread, or
        by another asker, which hands it over."""
        with self._questions:
            while number not in self._answers:
                if self._reading:
                    self._questions.wait()
                    continue
                self._reading = True
                self._questions.release()
                try:
                    message = self._channel.receive()
                finally:
                    self._questions.acquire()
                    self._reading = False
                    self._questions.notify_all()
                if message[0] != "called" or len(message) < 2:
                    raise self._utils.TritonModelException(
                        f"unexpected message {message[0]!r} from the server while execute runs"
                    )
                self._answers[message[1]] = message
            return self._answers.pop(number)

    def _response(self, payload: Any) -> Any:
        """A call's payload as the caller's InferenceResponse (None: the final flag alone)."""
        pb = self._utils
        if payload is None:
            return pb.InferenceResponse(output_tensors=[])
        if isinstance(payload, str):
            return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(payload))
        outputs: dict[str, np.ndarray] = payload[0] if isinstance(payload, tuple) else payload
        answered: str = payload[1] if isinstance(payload, tuple) else "{}"
        return pb.InferenceResponse(
            output_tensors=[pb.Tensor(name, array) for name, array in outputs.items()],
            parameters=json.loads(answered),
        )

    def _sender(
        self, batch: int, index: int, finals: list[bool], moved_on: list[bool]
    ) -> Callable[[Any, bool], None]:
        def send(response: Any, final: bool) -> None:
            pb = self._utils
            if not self._decoupled:
                raise pb.TritonModelException(
                    "the response sender is for decoupled models (model_transaction_policy "
                    "{ decoupled: true }); this model must return one InferenceResponse per "
                    "request from execute"
                )
            if moved_on[index]:
                raise pb.TritonModelException(
                    "this request was rescheduled: send its responses through the request that "
                    "a later execute receives for it"
                )
            try:
                payload = None if response is None else self._payload(response)
            except ContractError as exc:
                raise pb.TritonModelException(str(exc)) from None
            finals[index] |= final
            self._channel.send(("response", batch, index, payload, final))

        return send

    def _payload(self, response: Any) -> Payload:
        pb = self._utils
        if not isinstance(response, pb.InferenceResponse):
            raise ContractError(
                f"a response must be a pb_utils.InferenceResponse, not {type(response).__name__}"
            )
        if response.has_error():
            return str(response.error().message())
        outputs: dict[str, np.ndarray] = {}
        for tensor in response.output_tensors():
            if not isinstance(tensor, pb.Tensor):
                raise ContractError(
                    f"output_tensors must hold pb_utils.Tensor objects, not {type(tensor).__name__}"
                )
            array = _wire_array(tensor.as_numpy())
            outputs[tensor.name()] = array.copy() if self._copy_outputs else array
        parameters = response.parameters()
        return outputs if parameters == "{}" else (outputs, parameters)

    @property
    def checks_readiness(self) -> bool:
        """Whether the model decides its own readiness (defines `is_ready`)."""
        return callable(getattr(self._model, "is_ready", None))

    def ready(self) -> bool:
        """The model's `is_ready()` (sync or async): False when it raises or answers anything
        but a bool, as Triton's python backend takes it. Called by one thread at a time."""
        try:
            answer = self._model.is_ready()
            if inspect.isawaitable(answer):
                if self._readiness_loop is None:
                    self._readiness_loop = _new_event_loop()
                answer = self._readiness_loop.run_until_complete(answer)
        except Exception as exc:
            _log().error("is_ready raised %s: the model is not ready", _describe(exc))
            return False
        if not isinstance(answer, bool):
            _log().error(
                "is_ready must return a bool, not %s: the model is not ready",
                type(answer).__name__,
            )
            return False
        return answer

    def finalize(self) -> str | None:
        finalize = getattr(self._model, "finalize", None)
        if not callable(finalize):
            return None
        try:
            finalize()
        except Exception as exc:
            _log().error("finalize raised\n%s", traceback.format_exc())
            return f"finalize raised {_describe(exc)}"
        return None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = _new_event_loop()
        return self._loop


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop for an `async def` model method. asyncio is imported here, by the models
    that need it: with the `ssl` module it brings, it would add about 4 MiB to every worker."""
    import asyncio

    return asyncio.new_event_loop()


def _writable(array: np.ndarray) -> np.ndarray:
    """Triton's inputs are the model's to write: a read-only one (a request's bytes, as pickle
    or the server hands them over) becomes a copy."""
    return array if array.flags.writeable else np.array(array)


def _wire_array(array: np.ndarray) -> np.ndarray:
    """A plain ndarray; object items as bytes (str as UTF-8), so the server unpickles no objects."""
    if array.dtype != object:
        return np.asarray(array)
    items = [_item_bytes(item) for item in array.flat]
    return np.fromiter(items, dtype=object, count=len(items)).reshape(array.shape)


def _item_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return bytes(item)
    if isinstance(item, str):
        return item.encode("utf-8")
    # Triton serializes any other object of a BYTES tensor through str() as well.
    return str(item).encode("utf-8")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _log() -> logging.Logger:
    return logging.getLogger(UTILS_MODULE)


def _setup_logging(model: str, instance: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    label = f"python model '{model}' instance '{instance}'".replace("%", "%%")
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s %(levelname).1s {label} %(filename)s:%(lineno)d] %(message)s"
        )
    )
    logger = _log()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # log_verbose lines stay quiet, as in Triton by default
    logger.propagate = False


def _load_sibling(module_name: str, file_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, Path(__file__).with_name(file_name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_utils(shared_dir: str | None = None) -> ModuleType:
    """A fresh copy of Convoy's pb_utils, loaded by path (no Convoy import), installed as
        `triton_python_backend_utils` for the model.py imported next: each in-process model has its
        own, so that its `exec` reaches its own instance; `shared_dir` is where its `shared_array`
    keeps the version's arrays."""
    module = _load_sibling(UTILS_MODULE, "pb_utils.py")
    module._install_shared_dir(shared_dir)  # where its shared_array keeps arrays
    return module


def model_class(spec: dict[str, Any], module_name: str = _MODEL_MODULE) -> type:
    """Import model.py by path as `module_name`; its TritonPythonModel, or ContractError with
    the reason. In a worker (`model`) its directory goes first on sys.path, as Triton's stub
    puts it; in the server's process last, so that it never shadows what the server imports."""
    model_path = Path(spec["model_path"])
    directory = str(model_path.parent)  # model.py may import modules beside it
    if module_name == _MODEL_MODULE:
        sys.path.insert(0, directory)
    elif directory not in sys.path:
        sys.path.append(directory)
    module_spec = importlib.util.spec_from_file_location(module_name, model_path)
    if module_spec is None or module_spec.loader is None:
        raise ContractError(f"'{model_path}' cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickle look the module up there
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        _log().error("importing %s raised\n%s", model_path, traceback.format_exc())
        raise ContractError(f"importing '{model_path}' raised {_describe(exc)}") from None
    model_class = getattr(module, "TritonPythonModel", None)
    if not isinstance(model_class, type):
        raise ContractError(f"'{model_path}' defines no class TritonPythonModel")
    return model_class


def initialize_model(spec: dict[str, Any], cls: type) -> Any:
    """A TritonPythonModel of `cls`, initialized with spec's args; raises ContractError."""
    try:
        model = cls()
        initialize = getattr(model, "initialize", None)
        if callable(initialize):
            initialize(spec["args"])
    except Exception as exc:
        _log().error("initialize raised\n%s", traceback.format_exc())
        raise ContractError(f"initialize raised {_describe(exc)}") from None
    return model


def _auto_complete(spec: dict[str, Any], utils: ModuleType) -> dict[str, Any]:
    """The config after the model's `auto_complete_config` (as it was when there is none)."""
    config = utils.ModelConfig(json.loads(spec["args"]["model_config"]))
    complete = getattr(model_class(spec), "auto_complete_config", None)
    if not callable(complete):
        return dict(config.as_dict())
    try:
        completed = complete(config)
    except Exception as exc:
        _log().error("auto_complete_config raised\n%s", traceback.format_exc())
        raise ContractError(f"auto_complete_config raised {_describe(exc)}") from None
    if not isinstance(completed, utils.ModelConfig):
        raise ContractError(
            "auto_complete_config must return the pb_utils.ModelConfig it was given, not "
            f"{type(completed).__name__}"
        )
    return dict(completed.as_dict())


class Asks:
    """A worker's questions on their own socket, which the server answers at any time, from
    any thread of the model: `request.is_cancelled()`, custom metrics and model loading."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def cancelled(self, batch: int, index: int) -> bool:
        with self._lock:
            self._sock.sendall(ASK_CANCEL + CANCEL_CHECK.pack(batch, index))
            return self._sock.recv(1, socket.MSG_WAITALL) == b"1"

    def server(self, request: dict[str, Any], answered: bool) -> dict[str, Any]:
        """pb_utils' server ask: the server's answer to one request; a metric's update
        (`answered` False) is sent without waiting, and the server carries it out in order."""
        body = json.dumps(request).encode()
        if len(body) > LARGEST_ASK_BYTES:
            return {"error": f"a request to the server holds {LARGEST_ASK_BYTES >> 20} MiB at most"}
        if not answered:
            with self._lock:
                self._sock.sendall(ASK_UPDATE + LENGTH.pack(len(body)) + body)
            return {}
        with self._lock:
            self._sock.sendall(ASK_SERVER + LENGTH.pack(len(body)) + body)
            head = self._sock.recv(LENGTH.size, socket.MSG_WAITALL)
            answer = self._sock.recv(LENGTH.unpack(head)[0], socket.MSG_WAITALL) if head else b""
        if not answer:
            return {"error": "the server closed the worker's channel"}
        reply: dict[str, Any] = json.loads(answer)
        return reply


def _watch_parent(parent_pid: int) -> None:
    """Exit when the server dies, even while model code hangs and nobody reads the socket."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="convoy-parent-watch", daemon=True).start()


def _serve_readiness(sock: socket.socket, server: ModelServer) -> None:
    """On its own thread: answer each readiness request (one byte) with b"1" (ready) or b"0",
    until the server closes the socket."""
    while True:
        try:
            if not sock.recv(1):
                return
            sock.sendall(b"1" if server.ready() else b"0")
        except OSError:
            return


def _behind_the_loop() -> None:
    """This process under SCHED_BATCH: its threads so far (NumPy's BLAS pool starts as it is
    imported), and by inheritance those it starts, so that their wake-ups never preempt the
    server's event loop (the server's `server.contract.scheduling` says why, and when not)."""
    if os.environ.get("CONVOY_LOOP_FIRST", "1").strip() == "0" or not hasattr(os, "SCHED_BATCH"):
        return
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return  # started under a policy of the environment's choosing
        for thread in os.listdir("/proc/self/task"):
            os.sched_setscheduler(int(thread), os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        return


def main(argv: list[str]) -> int:
    # Run as a script, Python put this directory first on sys.path; model.py must not see it.
    own_directory = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != own_directory]
    _behind_the_loop()
    frames = _load_sibling(_FRAMES_MODULE, "_frames.py")
    incoming, outgoing = (frames.Ring(fd, os.fstat(fd).st_size) for fd in map(int, argv[2:4]))
    channel = frames.WorkerChannel(socket.socket(fileno=int(argv[1])), incoming, outgoing)
    readiness = socket.socket(fileno=int(argv[4]))
    asks = Asks(socket.socket(fileno=int(argv[5])))
    _watch_parent(os.getppid())
    kind, spec = channel.receive()
    _setup_logging(spec["model_name"], spec["instance_name"])
    utils = load_utils(spec.get("shared_dir"))
    try:
        if kind == "auto_complete":
            channel.send(("completed", _auto_complete(spec, utils)))
            return 0
        utils._install_server_ask(asks.server)  # the server answers from initialize on
        model = initialize_model(spec, model_class(spec))
    except ContractError as exc:
        channel.send(("failed", str(exc)))
        return 1
    server = ModelServer(channel, sys.modules[UTILS_MODULE], model, spec, asks=asks)
    if server.checks_readiness:
        threading.Thread(
            target=_serve_readiness, args=(readiness, server), name="convoy-readiness", daemon=True
        ).start()
    # What initialize loaded lives as long as the worker: leave it out of the garbage
    # collector's full passes, which would otherwise walk the model's objects again and again.
    gc.collect()
    gc.freeze()
    channel.send(("ready", server.checks_readiness))
    server.serve()
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except (OSError, EOFError):  # the server went away mid-message
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter shutdown: threads a model left running must not keep the worker alive.
    os._exit(code)
