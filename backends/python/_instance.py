"""`PythonInstance`: one instance of a Triton python model, served by its own worker process, or
in the server's process when the model asks for it (`LocalWorker`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from backends.base import ExecutionResult, ModelSignature, Parameters, TensorMap
from backends.custom_metrics import CustomMetrics
from backends.daemon_thread import on_daemon_thread
from backends.device import Device
from backends.errors import ExecutionError, ModelLoadError
from backends.python._calls import LATE_ANSWER_S, ModelCaller, ModelControl, Questions
from backends.python._config import (
    InstanceSpec,
    is_decoupled,
    model_signature,
    output_specs,
    worker_spec,
)
from backends.python._local import LocalWorker
from backends.python._process import WorkerProcess
from backends.python._replies import Replies, ResponseSend
from backends.python._runner import BatchRunner, deadline_ns_after
from backends.python._server_channel import WorkerFailure, WorkerRefused
from backends.python._settings import INLINE_EXECUTE_PARAMETER, PythonSettings
from backends.python._shared import SharedArrays
from backends.python._supervisor import Supervisor
from proto import model_config_pb2 as mc

_log = logging.getLogger(__name__)

_CPU = Device.cpu()
# How long a model's `is_ready()` may take before its model answers not ready (Triton's 5 s).
READY_TIMEOUT_S = 5.0
_MODEL_LOADING = frozenset({"load_model", "unload_model", "is_model_ready"})


class PythonInstance:
    """A model.py's TritonPythonModel in a worker process, or in the server's; its batches run
    through a `BatchRunner`.

    A worker that outlives the execute timeout or dies fails its batch and is replaced by a fresh
    one (initialize runs again), so the instance keeps serving. A worker that dies between
    batches is seen at once by the thread that watches it: the instance is not `healthy` (its
    model not ready) until that thread has started the next one.
    """

    def __init__(
        self,
        model: InstanceSpec,
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
        self._replies = Replies(model, output_specs(config))
        self._workers = Supervisor(
            model, settings, self._answer_call, self._server_request, self._questions.cancelled_in
        )
        # The readiness check in flight and the worker it asks: later checks wait for it
        # rather than queue another call of is_ready() behind it.
        self._readiness: tuple[WorkerProcess | LocalWorker, asyncio.Future[bool]] | None = None
        self._runner = BatchRunner(model, settings, self._workers, self._questions, self._replies)

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
        device: Device = _CPU,
    ) -> PythonInstance:
        """Start the worker and run initialize(); blocking, so call it from a thread.

        `caller` serves the model's `InferenceRequest.exec` (business logic scripting); `shared`
        holds the arrays the version's instances share (`pb_utils.shared_array`); `metrics`
        keeps the families the model registers (`pb_utils.MetricFamily`); `control` serves its
        model loading API (`pb_utils.load_model`); `device` is the instance's place, which
        initialize's args name (its tensors stay host arrays)."""
        spec = worker_spec(name, model_dir, version, config, settings.backend_file, device)
        settings = settings.resolved(config.name, model_dir)  # the loader's are already
        if shared is not None:
            spec["shared_dir"] = shared.acquire()
        model = InstanceSpec(config.name, version, name, is_decoupled(config), spec)
        instance = cls(model, config, settings, caller, shared, metrics, control)
        try:
            instance._workers.start()
        except ModelLoadError:
            instance.close()
            raise
        return instance

    @property
    def restarts(self) -> int:
        """How many times its worker was replaced (a sequence batcher ends the sequences that
        began on an earlier one: their state in the model went with it)."""
        return self._workers.replaced

    @property
    def healthy(self) -> bool:
        """Whether its worker runs (False from a worker's death until its replacement
        serves)."""
        worker = self._workers.worker
        return worker is not None and worker.alive()

    async def ready(self) -> bool:
        """`healthy`, and, when model.py defines `is_ready`, what it answers within
        READY_TIMEOUT_S (False when it raises, answers anything but a bool or takes longer; a
        late answer serves the checks that arrive while it runs). Asked on every check."""
        worker = self._workers.worker
        if worker is None or not worker.alive():
            return False
        if not worker.checks_readiness:
            return True
        if self._readiness is None or self._readiness[0] is not worker or self._readiness[1].done():
            # A daemon thread: an is_ready that hangs must not hold the server's exit.
            checking = on_daemon_thread(worker.check_ready, name="convoy-readiness")
            self._readiness = (worker, asyncio.ensure_future(checking))
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
        return await self._runner.execute(requests, parameters)

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
        return await self._runner.execute_decoupled(requests, send, parameters, cancelled)

    def close(self) -> None:
        """Run finalize() (bounded by the execute timeout) and end the worker; blocking."""
        if self._workers.closed:
            return
        self._workers.close()
        self._runner.close()
        # A batch on the event loop ends by its execute timeout (the thread it hands work to
        # refuses it now).
        worker = self._workers.take(self._settings.execute_timeout_s + LATE_ANSWER_S)
        if self.shared is not None:  # what its worker still maps stays until it exits
            self.shared.release()
        if worker is not None:
            error = worker.finalize(deadline_ns_after(self._settings.execute_timeout_s))
            if error is not None:
                _log.warning("%s: %s", self._model.where(), error)
        if self._metrics is not None:  # after finalize, which may still update them
            self._metrics.release(self)

    def _answer_call(self, question: tuple[Any, ...]) -> tuple[Any, ...]:
        """An in-process model's question, answered on its own thread within the execute
        timeout."""
        if question[0] == "call" and self._runner.running_inline:
            return ("called", question[2], self._off_the_loop("call another model"), True)
        try:
            return self._questions.answer(
                question, deadline_ns_after(self._settings.execute_timeout_s)
            )
        except WorkerFailure:
            timeout_s = self._settings.execute_timeout_s
            return (
                "called",
                question[2],
                f"the called model did not answer within {timeout_s:g} s",
                True,
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
        if self._runner.running_inline:
            return {"error": self._off_the_loop("use the model loading API")}
        # finalize runs while its own model unloads: a load could wait on it
        if self._workers.closed:
            return {"error": "the model loading API is not available in finalize"}
        if request.get("model") == self._model.name and request.get("op") != "is_model_ready":
            return {"error": f"model '{self._model.name}' cannot load or unload itself"}
        return self._control(request)

    def _off_the_loop(self, what: str) -> str:
        """The error of a call made while execute runs inline, from execute or from a thread it
        waits for: the call would wait for the event loop that waits for execute. The instance's
        batches run on its thread from now on."""
        self._runner.keep_on_thread()
        _log.warning(
            "%s: execute ran on the event loop (%s) and tried to %s; its batches run on the "
            "instance's thread from now on",
            self._model.where(),
            INLINE_EXECUTE_PARAMETER,
            what,
        )
        return (
            f"{self._model.where()}: execute ran on the server's event loop "
            f"({INLINE_EXECUTE_PARAMETER}), where it cannot {what}; the model's batches run on "
            "its thread from now on"
        )
