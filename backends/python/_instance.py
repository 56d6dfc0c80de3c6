"""`PythonInstance`: one instance of a Triton python model, served by its own worker process, or
in the server's process when the model asks for it (`LocalWorker`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format

from backends.base import (
    ExecutionResult,
    ModelSignature,
    Outputs,
    Parameters,
    Response,
    TensorMap,
)
from backends.custom_metrics import CustomMetrics
from backends.device import Device, host_tensors
from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.instance_thread import InstanceClosedError, InstanceThread
from backends.python._calls import ModelCaller, ModelControl, Questions
from backends.python._config import (
    config_json,
    is_decoupled,
    model_signature,
    output_specs,
)
from backends.python._local import LocalWorker
from backends.python._outputs import check_outputs
from backends.python._process import AskAnswers, WorkerFailure, WorkerProcess, WorkerRefused
from backends.python._settings import PythonSettings
from backends.python._shared import SharedArrays
from proto import model_config_pb2 as mc

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

_DEFAULT_MODEL_FILENAME = "model.py"
_CPU = Device.cpu()
# How long a model's `is_ready()` may take before its model answers not ready (Triton's 5 s).
READY_TIMEOUT_S = 5.0
_LATE_ANSWER_S = 60.0  # how long a call's answer may take to reach a worker busy reading it

# How a decoupled execution hands each response to the event loop: (request index, outputs or
# the error that fails the request or None for a bare final flag, whether it is the final one).
ResponseSend = Callable[[int, Response | None, bool], None]
# The questions a model asks the server while its batch runs (`Questions` answers them).
_QUESTIONS = frozenset({"call", "next", "cancel", "is_cancelled"})
_MODEL_LOADING = frozenset({"load_model", "unload_model", "is_model_ready"})


@dataclass(frozen=True, slots=True)
class _Model:
    """Who this instance is, and what its worker is started with."""

    name: str  # the model's name
    version: int
    instance: str  # this instance's name (Triton's model_instance_name)
    decoupled: bool  # model_transaction_policy { decoupled: true }
    worker_spec: dict[str, Any]  # the worker's ("initialize", spec) message; never mutated

    def where(self) -> str:
        return f"model '{self.name}' instance '{self.instance}'"


class PythonInstance:
    """A model.py's TritonPythonModel in a worker process, or in the server's.

    A batch for a worker process runs from the event loop, which sends it and reads its answer
    (or, for a decoupled model, each response) without blocking (`WorkerProcess.send_async`,
    `receive_async`): no thread hand-off, no second Python thread taking turns with the loop
    for the GIL. The instance's one executor thread does what blocks: restarting a worker,
    answering the model's calls to the server (business logic scripting, `is_cancelled`) while
    it reads the rest of that batch, and an in-process model's execute.

    A worker that outlives the execute timeout or dies fails its batch and is replaced by a fresh
    one (initialize runs again), so the instance keeps serving. A worker that dies between
    batches is seen at once by the thread that watches it: the instance is not `healthy` (its
    model not ready) until that thread has started the next one.
    """

    def __init__(
        self,
        model: _Model,
        config: mc.ModelConfig,
        settings: PythonSettings,
        caller: ModelCaller | None = None,
        shared: SharedArrays | None = None,
        metrics: CustomMetrics | None = None,
        control: ModelControl | None = None,
    ) -> None:
        self._model = model
        self.shared = shared  # the version's shared arrays, released at close
        self._metrics = metrics  # the server's custom metrics (None: the model may not use any)
        self._control = control  # the model loading API (None: not available)
        self._settings = settings
        self._questions = Questions(caller)  # what the model asks while its batch runs
        self._signature = model_signature(config)
        self._outputs = output_specs(config)
        self._output_names = [spec.name for spec in self._outputs]
        self._worker: WorkerProcess | LocalWorker | None = None
        # Held while the worker is replaced: by the executor thread after a failed batch, or by
        # the watcher of a worker that died between batches.
        self._replacing = threading.Lock()
        self._batches = itertools.count()
        self._closed = False
        # The readiness check in flight and the worker it asks: later checks wait for it
        # rather than queue another call of is_ready() behind it.
        self._readiness: tuple[WorkerProcess | LocalWorker, asyncio.Future[bool]] | None = None
        self._executor = InstanceThread(model.instance)
        self._turn = asyncio.Lock()  # a worker's batches from the event loop, one at a time
        # Clear while a batch on the event loop holds the worker's channel: the watcher and
        # close() wait for it, so that neither closes the channel under the loop's reads.
        self._channel_free = threading.Event()
        self._channel_free.set()

    @classmethod
    def load(
        cls,
        name: str,
        model_dir: Path,
        version: int,
        config: mc.ModelConfig,
        settings: PythonSettings,
        caller: ModelCaller | None = None,
        shared: SharedArrays | None = None,
        metrics: CustomMetrics | None = None,
        control: ModelControl | None = None,
    ) -> PythonInstance:
        """Start the worker and run initialize(); blocking, so call it from a thread.

        `caller` serves the model's `InferenceRequest.exec` (business logic scripting); `shared`
        holds the arrays the version's instances share (`pb_utils.shared_array`); `metrics`
        keeps the families the model registers (`pb_utils.MetricFamily`); `control` serves its
        model loading API (`pb_utils.load_model`)."""
        spec = worker_spec(name, model_dir, version, config, settings.backend_file)
        settings = settings.resolved(config.name, model_dir)  # the loader's are already
        if shared is not None:
            spec["shared_dir"] = shared.acquire()
        model = _Model(config.name, version, name, is_decoupled(config), spec)
        instance = cls(model, config, settings, caller, shared, metrics, control)
        try:
            instance._worker = instance._start_worker()
        except ModelLoadError:
            instance.close()
            raise
        return instance

    @property
    def healthy(self) -> bool:
        """Whether its worker runs (False from a worker's death until its replacement
        serves)."""
        worker = self._worker
        return worker is not None and worker.alive()

    async def ready(self) -> bool:
        """`healthy`, and, when model.py defines `is_ready`, what it answers within
        READY_TIMEOUT_S (False when it raises, answers anything but a bool or takes longer; a
        late answer serves the checks that arrive while it runs). Asked on every check."""
        worker = self._worker
        if worker is None or not worker.alive():
            return False
        if not worker.checks_readiness:
            return True
        if self._readiness is None or self._readiness[0] is not worker or self._readiness[1].done():
            self._readiness = (worker, asyncio.ensure_future(asyncio.to_thread(worker.check_ready)))
        try:
            return await asyncio.wait_for(asyncio.shield(self._readiness[1]), READY_TIMEOUT_S)
        except TimeoutError:
            _log.warning(
                "%s: is_ready did not return within %g s: the model is not ready",
                self._model.where(),
                READY_TIMEOUT_S,
            )
            return False

    @staticmethod
    def complete_config(
        model_dir: Path, version: int, config: mc.ModelConfig, settings: PythonSettings
    ) -> mc.ModelConfig:
        """The config after model.py's `TritonPythonModel.auto_complete_config` (run in a worker
        of its own), as Triton's python backend completes it; blocking."""
        name = f"{config.name}_{version}_auto_complete"
        spec = worker_spec(name, model_dir, version, config, settings.backend_file)
        deadline_ns = time.monotonic_ns() + int(settings.initialize_timeout_s * 1e9)
        try:
            environment = settings.resolved(config.name, model_dir).environment
            completed = WorkerProcess.auto_complete(spec, deadline_ns, environment)
        except WorkerRefused as refusal:  # model.py did not import, or the method raised
            raise ModelLoadError(f"model '{config.name}': {refusal.reason}") from None
        except WorkerFailure as failure:
            raise ModelLoadError(
                f"model '{config.name}' version {version}: auto-complete failed: the worker "
                f"{failure.reason}"
            ) from None
        try:
            return json_format.ParseDict(completed, mc.ModelConfig())
        except json_format.ParseError as exc:
            raise ModelLoadError(
                f"model '{config.name}': auto_complete_config made an invalid config: {exc}"
            ) from None

    @property
    def name(self) -> str:
        return self._model.instance

    @property
    def signature(self) -> ModelSignature:
        return self._signature

    @property
    def device(self) -> Device:
        return _CPU  # the worker reads and answers NumPy arrays

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        """Run execute(requests) in the worker; one response or error per request, in order.
        Each request's `parameters` are what its `request.parameters()` shows; outputs are
        host arrays whatever `device_outputs` says."""
        if self._model.decoupled:
            raise ExecutionError(
                f"{self._model.where()}: the model is decoupled; its responses stream through "
                "execute_decoupled"
            )
        if self._settings.in_process:
            return await self._submit(self._run, requests, parameters)
        # A worker's batch runs on the event loop, which waits for the answer without a thread.
        return await _to_the_end(self._run_async(requests, parameters))

    async def execute_decoupled(
        self,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters] = (),
        cancelled: Callable[[int], bool] | None = None,
    ) -> ExecutionResult:
        """Run a decoupled model's execute; its responses reach `send` on the event loop.

        Every request gets exactly one call with final=True: the model's last one, or an error
        when execute fails, the worker dies or the timeout passes (then the worker restarts).
        Errors arrive through `send`, never by raising; `responses` holds one empty entry per
        request, and `rescheduled` the requests an iterative sequence's model rescheduled (their
        final calls come in a later batch). The coroutine returns once execute returned and
        every request not rescheduled got its final call. `cancelled(i)`
        (callable from any thread) says whether request i's caller went away: the model's
        `request.is_cancelled()`.
        """
        if not self._model.decoupled:
            raise ExecutionError(f"{self._model.where()}: the model is not decoupled; call execute")
        if self._settings.in_process:
            emit = _from_thread(send)
            return await self._submit(self._run_decoupled, requests, emit, parameters, cancelled)
        # From the event loop, as `execute` runs a worker's batch: each response reaches `send`
        # as the loop reads it.
        return await _to_the_end(self._run_decoupled_async(requests, send, parameters, cancelled))

    def close(self) -> None:
        """Run finalize() (bounded by the execute timeout) and end the worker; blocking."""
        if self._closed:
            return
        with self._replacing:  # a batch on the event loop holds the channel now or never will
            self._closed = True
        self._executor.close(cancel_pending=True)
        # A batch on the event loop ends by its execute timeout (the thread it hands work to
        # refuses it now).
        self._channel_free.wait(self._settings.execute_timeout_s + _LATE_ANSWER_S)
        with self._replacing:
            worker, self._worker = self._worker, None
        if self.shared is not None:  # what its worker still maps stays until it exits
            self.shared.release()
        if worker is not None:
            error = worker.finalize(self._deadline_ns(self._settings.execute_timeout_s))
            if error is not None:
                _log.warning("%s: %s", self._model.where(), error)
        if self._metrics is not None:  # after finalize, which may still update them
            self._metrics.release(self)

    async def _submit(self, run: Callable[..., _T], *args: Any) -> _T:
        self._questions.loop = asyncio.get_running_loop()
        try:
            return await self._executor.run(run, *args)
        except InstanceClosedError as exc:  # close() closes the thread: its refusal says it
            raise ExecutionError(f"{self._model.where()}: the instance is closed") from exc

    async def _run_async(
        self, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> ExecutionResult:
        """A worker's batch from the event loop, one at a time; what blocks (restarting a
        worker, answering the model's calls to the server) runs on the instance's thread."""
        async with self._channel() as worker:
            if worker is None:  # being replaced, gone or closing: the thread waits for it
                return await self._submit(self._run, requests, parameters)
            return await self._run_held(worker, requests, parameters)

    async def _run_held(
        self,
        worker: WorkerProcess,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters],
    ) -> ExecutionResult:
        batch = next(self._batches)
        start_ns = time.monotonic_ns()
        deadline_ns = self._deadline_ns(self._settings.execute_timeout_s)
        try:
            message = self._execute_message(batch, requests, parameters)
            await worker.send_async(message, deadline_ns)
            sent_ns = time.monotonic_ns()
            reply = await worker.reply_async(batch, deadline_ns)
            if reply[0] in _QUESTIONS:  # the model calls the server: the thread reads on
                reply = await self._submit(self._answered_from, worker, batch, deadline_ns, reply)
        except WorkerFailure as failure:
            raise await self._submit(self._recover, worker, failure) from None
        return self._outcome(requests, reply, start_ns, sent_ns)

    async def _run_decoupled_async(
        self,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        async with self._channel() as worker:
            if worker is None:  # being replaced, gone or closing: the thread waits for it
                emit = _from_thread(send)
                return await self._submit(
                    self._run_decoupled, requests, emit, parameters, cancelled
                )
            return await self._run_decoupled_held(worker, requests, send, parameters, cancelled)

    async def _run_decoupled_held(
        self,
        worker: WorkerProcess,
        requests: Sequence[TensorMap],
        send: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        batch, deadline_ns, streamed = self._begin_stream(requests, cancelled)
        try:
            message = self._execute_message(batch, requests, parameters)
            await worker.send_async(message, deadline_ns)
            streamed.sent_ns = time.monotonic_ns()
            while not streamed.over:
                reply = await worker.reply_async(batch, deadline_ns)
                if reply[0] in _QUESTIONS:  # the model calls the server: the thread reads on
                    emit = _from_thread(send)
                    stream_on = self._stream_on
                    await self._submit(stream_on, worker, batch, deadline_ns, streamed, emit, reply)
                    break
                if not self._take(reply, streamed, send):
                    break
        except WorkerFailure as failure:
            try:
                error = await self._submit(self._recover, worker, failure)
            except ExecutionError as closed:  # the instance closed meanwhile
                error = closed
            _finish(streamed.finished, send, str(error))
        except ExecutionError as closed:  # the thread that reads on closed with the instance
            _finish(streamed.finished, send, str(closed))
        finally:
            self._questions.end_batch()
        return streamed.result()

    @contextlib.asynccontextmanager
    async def _channel(self) -> AsyncIterator[WorkerProcess | None]:
        """The worker, its channel held for a batch on the event loop (one at a time, and
        `_channel_free` clear meanwhile); None while a thread replaces it, when it is in
        process, or once the instance closes."""
        async with self._turn:
            worker = None
            if self._replacing.acquire(blocking=False):  # not while a thread replaces it
                try:
                    if not self._closed and isinstance(self._worker, WorkerProcess):
                        worker = self._worker
                        self._channel_free.clear()
                finally:
                    self._replacing.release()
            try:
                yield worker
            finally:
                if worker is not None:
                    self._channel_free.set()

    # Everything below runs on the instance's executor thread (`_outcome` on either side).

    def _run(
        self, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> ExecutionResult:
        worker = self._running_worker()
        batch = next(self._batches)
        start_ns = time.monotonic_ns()
        deadline_ns = self._deadline_ns(self._settings.execute_timeout_s)
        try:
            worker.send(self._execute_message(batch, requests, parameters), deadline_ns)
            sent_ns = time.monotonic_ns()
            reply = next(self._answered(worker, batch, deadline_ns))
        except WorkerFailure as failure:
            raise self._recover(worker, failure) from None
        finally:
            self._questions.end_batch()
        return self._outcome(requests, reply, start_ns, sent_ns)

    def _answered_from(
        self, worker: WorkerProcess, batch: int, deadline_ns: int, question: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        """The batch's reply, read after the model's first question (which the event loop
        read), answering it and the others on the way."""
        try:
            self._answer(worker, question, deadline_ns)
            return next(self._answered(worker, batch, deadline_ns))
        finally:
            self._questions.end_batch()

    def _outcome(
        self,
        requests: Sequence[TensorMap],
        reply: tuple[Any, ...],
        start_ns: int,
        sent_ns: int,
    ) -> ExecutionResult:
        """A batch's responses from its reply ("done" or "failed")."""
        received_ns = time.monotonic_ns()
        rescheduled: frozenset[int] = frozenset()
        if reply[0] == "done" and isinstance(reply[2], list) and len(reply[2]) == len(requests):
            rescheduled = frozenset(reply[4])
            responses = [
                {} if index in rescheduled else self._response(payload)
                for index, payload in enumerate(reply[2])
            ]
            execute_ns = int(reply[3])
        else:
            reason = str(reply[2]) if reply[0] == "failed" else f"unexpected reply {reply[0]!r}"
            responses = [ExecutionError(f"{self._model.where()}: {reason}") for _ in requests]
            execute_ns = received_ns - sent_ns
        return _result(responses, start_ns, sent_ns, execute_ns, time.monotonic_ns(), rescheduled)

    def _run_decoupled(
        self,
        requests: Sequence[TensorMap],
        emit: ResponseSend,
        parameters: Sequence[Parameters],
        cancelled: Callable[[int], bool] | None,
    ) -> ExecutionResult:
        worker = self._running_worker()
        batch, deadline_ns, streamed = self._begin_stream(requests, cancelled)
        try:
            worker.send(self._execute_message(batch, requests, parameters), deadline_ns)
            streamed.sent_ns = time.monotonic_ns()
            self._stream_on(worker, batch, deadline_ns, streamed, emit)
        except WorkerFailure as failure:
            _finish(streamed.finished, emit, str(self._recover(worker, failure)))
        finally:
            self._questions.end_batch()
        return streamed.result()

    def _begin_stream(
        self, requests: Sequence[TensorMap], cancelled: Callable[[int], bool] | None
    ) -> tuple[int, int, _Streamed]:
        """A decoupled batch begins: its number, its deadline, its progress."""
        batch = next(self._batches)
        self._questions.running(batch, cancelled)
        deadline_ns = self._deadline_ns(self._settings.execute_timeout_s)
        return batch, deadline_ns, _Streamed([False] * len(requests), time.monotonic_ns())

    def _stream_on(
        self,
        worker: WorkerProcess | LocalWorker,
        batch: int,
        deadline_ns: int,
        streamed: _Streamed,
        emit: ResponseSend,
        question: tuple[Any, ...] | None = None,
    ) -> None:
        """A decoupled batch's messages until it is over, answering the model's questions on
        the way (first `question`, which the event loop read)."""
        if question is not None:
            self._answer(worker, question, deadline_ns)
        replies = self._answered(worker, batch, deadline_ns)
        while not streamed.over and self._take(next(replies), streamed, emit):
            pass

    def _take(self, reply: tuple[Any, ...], streamed: _Streamed, emit: ResponseSend) -> bool:
        """One of a decoupled batch's messages (a response, "done", or a failure, which ends
        every request still open: then False)."""
        if reply[0] == "response":
            _, _, index, payload, final = reply
            if not streamed.finished[index]:
                streamed.finished[index] = bool(final)
                emit(index, None if payload is None else self._response(payload), final)
        elif reply[0] == "done":
            streamed.returned = True
            streamed.execute_ns = int(reply[3])
            streamed.rescheduled = frozenset(reply[4])
            for index in streamed.rescheduled:  # their final flags come in a later batch
                streamed.finished[index] = True
        else:
            reason = str(reply[2]) if reply[0] == "failed" else f"unexpected {reply[0]!r}"
            _finish(streamed.finished, emit, f"{self._model.where()}: {reason}")
            return False
        return True

    def _answered(
        self, worker: WorkerProcess | LocalWorker, batch: int, deadline_ns: int
    ) -> Iterator[tuple[Any, ...]]:
        """The batch's replies; the model's questions (calls to other models, whether a request
        was cancelled) are answered on the way."""
        for reply in worker.replies(batch, deadline_ns):
            if reply[0] in _QUESTIONS:
                self._answer(worker, reply, deadline_ns)
            else:
                yield reply

    def _answer(
        self, worker: WorkerProcess | LocalWorker, question: tuple[Any, ...], deadline_ns: int
    ) -> None:
        if question[0] == "call" and not question[8]:  # runs aside: calls go side by side
            self._questions.call_aside(question, lambda answer: _send_late(worker, answer))
        elif question[0] == "next":  # a stream's next response, now or when it comes
            self._questions.next_aside(question, lambda answer: _send_late(worker, answer))
        else:
            worker.send(self._questions.answer(question, deadline_ns), deadline_ns)

    def _answer_call(self, question: tuple[Any, ...]) -> tuple[Any, ...]:
        """An in-process model's question, answered on its own thread within the execute
        timeout."""
        try:
            return self._questions.answer(
                question, self._deadline_ns(self._settings.execute_timeout_s)
            )
        except WorkerFailure:
            timeout_s = self._settings.execute_timeout_s
            return (
                "called",
                question[2],
                f"the called model did not answer within {timeout_s:g} s",
                True,
            )

    def _execute_message(
        self, batch: int, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> tuple[Any, ...]:
        inputs = [dict(host_tensors(arrays)) for arrays in requests]  # device ones copied
        shown = [dict(p) for p in parameters] if parameters else [{} for _ in requests]
        return ("execute", batch, inputs, self._output_names, shown)

    def _response(self, payload: Any) -> Response:
        if isinstance(payload, str):
            return ExecutionError(payload)  # the model's TritonError message, as Triton passes it
        if isinstance(payload, dict):
            return check_outputs(self._model.name, self._outputs, payload)
        if isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[0], dict):
            checked = check_outputs(self._model.name, self._outputs, payload[0])
            parameters = _parameters(payload[1])
            if isinstance(checked, ExecutionError) or parameters is None:
                return checked if parameters is not None else self._malformed()
            return Outputs(checked, parameters)
        return self._malformed()

    def _malformed(self) -> ExecutionError:
        return ExecutionError(f"{self._model.where()}: the worker sent a malformed response")

    def _running_worker(self) -> WorkerProcess | LocalWorker:
        with self._replacing:
            if self._worker is None:
                try:
                    self._worker = self._start_worker()
                except ModelLoadError as exc:
                    raise ExecutionError(
                        f"{self._model.where()}: the worker is not running and could not be "
                        f"restarted: {exc}"
                    ) from None
            return self._worker

    def _recover(
        self, worker: WorkerProcess | LocalWorker, failure: WorkerFailure
    ) -> ExecutionError:
        """Kill the worker that failed a batch and start another (unless its watcher already
        did); the error for that batch."""
        if failure.timed_out:
            what = f"execute did not return within {self._settings.execute_timeout_s:g} s"
        else:
            what = f"the worker {failure.reason} during execute"
        with self._replacing:
            if self._worker is worker:
                self._worker = None
                worker.kill()
                try:
                    self._worker = self._start_worker()
                except BackendError as exc:
                    return ExecutionError(
                        f"{self._model.where()}: {what}; restarting the worker failed: {exc}"
                    )
        return ExecutionError(f"{self._model.where()}: {what}; the worker was restarted")

    def _watch(self, worker: WorkerProcess) -> None:
        """On its own thread: wait for `worker` to end, and replace it if it died on its own
        (not killed or finalized by this instance, which takes it out first)."""
        code = worker.wait()
        while True:
            # A batch on the event loop that reads its channel sees the end itself, and
            # replaces the worker; it is waited for, so that the channel stays open under it.
            self._channel_free.wait()
            with self._replacing:
                if not self._channel_free.is_set():
                    continue  # another batch took the channel meanwhile
                if self._closed or self._worker is not worker:
                    return
                self._worker = None
                _log.error(
                    "%s: the worker exited with code %s; restarting it", self._model.where(), code
                )
                worker.kill()  # what it started goes too
                try:
                    self._worker = self._start_worker()
                except ModelLoadError as exc:
                    _log.error("%s: restarting the worker failed: %s", self._model.where(), exc)
                return

    def _start_worker(self) -> WorkerProcess | LocalWorker:
        timeout_s = self._settings.initialize_timeout_s
        try:
            if self._settings.in_process:
                return LocalWorker.start(
                    self._model.worker_spec, self._answer_call, self._server_request
                )
            answers = AskAnswers(self._questions.cancelled_in, self._server_request)
            worker = WorkerProcess.start(
                self._model.worker_spec,
                self._deadline_ns(timeout_s),
                answers,
                environment=self._settings.environment,
            )
            watcher = threading.Thread(
                target=self._watch, args=(worker,), name=f"{self._model.instance}-watch"
            )
            watcher.daemon = True  # a worker that never ends must not hold the server's exit
            watcher.start()
            return worker
        except WorkerRefused as refusal:
            reason = refusal.reason
        except WorkerFailure as failure:
            if failure.timed_out:
                reason = f"initialize did not return within {timeout_s:g} s"
            elif failure.exit_code is not None:
                reason = f"the worker {failure.reason} before initialize returned"
            else:
                reason = f"the worker {failure.reason}"
        raise ModelLoadError(
            f"model '{self._model.name}' version {self._model.version} instance "
            f"'{self._model.instance}': {reason}"
        )

    def _server_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """A request of the model's custom metrics or model loading API (any of its threads,
        any time)."""
        if request.get("op") not in _MODEL_LOADING:
            if self._metrics is None:
                return {"error": "custom metrics are not kept for this model"}
            return self._metrics.apply(self, request)
        if self._control is None:
            return {"error": "the model loading API is not available to this model"}
        if self._closed:  # finalize runs while its own model unloads: a load could wait on it
            return {"error": "the model loading API is not available in finalize"}
        if request.get("model") == self._model.name and request.get("op") != "is_model_ready":
            return {"error": f"model '{self._model.name}' cannot load or unload itself"}
        return self._control(request)

    @staticmethod
    def _deadline_ns(timeout_s: float) -> int:
        return time.monotonic_ns() + int(timeout_s * 1e9)


@dataclass(slots=True)
class _Streamed:
    """A decoupled batch as its messages come: which requests sent their final response,
    whether execute returned, its time in the worker, the requests it rescheduled."""

    finished: list[bool]
    start_ns: int
    sent_ns: int = 0  # 0 until the batch is sent
    returned: bool = False
    execute_ns: int = 0
    rescheduled: frozenset[int] = frozenset()

    @property
    def over(self) -> bool:
        return self.returned and all(self.finished)

    def result(self) -> ExecutionResult:
        """The batch's outcome once over: its phases, and one empty entry per request (its
        responses went out as they came)."""
        responses: list[Response] = [{} for _ in self.finished]
        sent_ns, done_ns = self.sent_ns or self.start_ns, time.monotonic_ns()
        rescheduled = self.rescheduled
        return _result(responses, self.start_ns, sent_ns, self.execute_ns, done_ns, rescheduled)


def _from_thread(send: ResponseSend) -> ResponseSend:
    """`send`, for a thread to call: each call runs on the event loop that is running now."""
    loop = asyncio.get_running_loop()

    def emit(index: int, response: Response | None, final: bool) -> None:
        loop.call_soon_threadsafe(send, index, response, final)

    return emit


async def _to_the_end(batch: Coroutine[Any, Any, _T]) -> _T:
    """A batch that keeps the worker's channel to its end even when its caller leaves (its
    answer must be read before the next batch's): the caller's cancellation does not reach it,
    and what it raises after the caller left is read, not logged as never retrieved."""
    task = asyncio.ensure_future(batch)
    task.add_done_callback(_retrieved)
    return await asyncio.shield(task)


def _retrieved(batch: asyncio.Future[Any]) -> None:
    if not batch.cancelled():
        batch.exception()


def _send_late(worker: WorkerProcess | LocalWorker, answer: tuple[Any, ...]) -> None:
    """A call's answer, sent once it finished: a worker that has gone meanwhile (its batch
    failed, and the failure is the batch's to report) or that no longer takes it is left."""
    with contextlib.suppress(WorkerFailure):
        worker.send(answer, time.monotonic_ns() + int(_LATE_ANSWER_S * 1e9))


def _parameters(text: object) -> Parameters | None:
    """Response parameters from the worker's JSON object string (bool, int or str values, as
    pb_utils checked them); None when they are not that."""
    try:
        parameters = json.loads(text) if isinstance(text, str) else None
    except json.JSONDecodeError:
        return None
    if not isinstance(parameters, dict) or not all(
        isinstance(value, bool | int | str) for value in parameters.values()
    ):
        return None
    return parameters


def _finish(finished: list[bool], emit: ResponseSend, message: str) -> None:
    """A final error for every request of the batch that has not had its final response."""
    if all(finished):
        # Every request already ended (say, execute raised after sending the final flags):
        # nobody is left to receive the error, so the log is where it shows.
        _log.error("%s", message)
    for index, done in enumerate(finished):
        if not done:
            finished[index] = True
            emit(index, ExecutionError(message), True)


def _result(
    responses: list[Response],
    start_ns: int,
    sent_ns: int,
    execute_ns: int,
    done_ns: int,
    rescheduled: frozenset[int] = frozenset(),
) -> ExecutionResult:
    """The batch's phases from this side's clock: it started at `start_ns`, its message was
    sent by `sent_ns`, its answer was read by `done_ns`; `execute_ns` is the worker's own time
    in execute (0: unknown, then all the time since sending). Execute is capped to the whole;
    the input phase is the send, less what execute overlapped of it (a worker may start before
    the last byte is sent, and an in-process one runs inside the send); output is the rest."""
    total_ns = done_ns - start_ns
    execute_ns = min(execute_ns, total_ns) or done_ns - sent_ns
    input_ns = min(sent_ns - start_ns, total_ns - execute_ns)
    output_ns = total_ns - input_ns - execute_ns
    return ExecutionResult(responses, input_ns, execute_ns, output_ns, rescheduled)


def worker_spec(
    name: str, model_dir: Path, version: int, config: mc.ModelConfig, backend_file: str = ""
) -> dict[str, Any]:
    """What a worker is started with: model.py's path (the version's, or a Python-based
    backend's), names, and Triton's initialize args."""
    model_path = (
        Path(backend_file)
        if backend_file
        else model_dir / str(version) / (config.default_model_filename or _DEFAULT_MODEL_FILENAME)
    )
    if not model_path.is_file():
        raise ModelLoadError(
            f"model '{config.name}' version {version}: '{model_path}' does not exist; the "
            "python backend needs it to define class TritonPythonModel"
        )
    args = {
        "model_config": config_json(config),
        "model_instance_kind": "CPU",
        "model_instance_name": name,
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": str(version),
        "model_name": config.name,
    }
    return {
        "model_path": str(model_path),
        "model_name": config.name,
        "instance_name": name,
        "version": version,
        "decoupled": is_decoupled(config),
        "iterative": config.sequence_batching.iterative_sequence,
        "args": args,
    }
