"""`Supervisor`: keeps one python model instance's worker running. It starts the worker (a process
of its own, or `LocalWorker` in the server's process), replaces one that fails a batch or dies
between batches, and lends its channel to one batch at a time on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable

from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.python._config import InstanceSpec
from backends.python._local import CallAnswer, LocalWorker, ServerAnswer
from backends.python._process import AskAnswers, WorkerProcess
from backends.python._server_channel import WorkerFailure, WorkerRefused
from backends.python._settings import PythonSettings

_log = logging.getLogger(__name__)


class Supervisor:
    """One instance's worker. `answer_call` answers an in-process model's questions on its own
    thread, `server_request` its requests of custom metrics and model loading (a worker
    process's come through `AskAnswers`, with `cancelled_in`)."""

    def __init__(
        self,
        model: InstanceSpec,
        settings: PythonSettings,
        answer_call: CallAnswer,
        server_request: ServerAnswer,
        cancelled_in: Callable[[int, int], bool],
    ) -> None:
        self._model = model
        self._settings = settings
        self._answer_call = answer_call
        self._server_request = server_request
        self._cancelled_in = cancelled_in
        self._worker: WorkerProcess | LocalWorker | None = None
        # Held while the worker is replaced: by the executor thread after a failed batch, or by
        # the watcher of a worker that died between batches.
        self._replacing = threading.Lock()
        self._closed = False
        self._replaced = 0  # workers replaced after a failed batch or a death between batches
        self._turn = asyncio.Lock()  # a worker's batches from the event loop, one at a time
        # Clear while a batch on the event loop holds the worker's channel: the watcher and
        # `take` wait for it, so that neither closes the channel under the loop's reads.
        self._channel_free = threading.Event()
        self._channel_free.set()

    @property
    def worker(self) -> WorkerProcess | LocalWorker | None:
        """The worker now (None while it is replaced, or once taken)."""
        return self._worker

    @property
    def replaced(self) -> int:
        """How many workers were replaced so far; each took its model's own state with it."""
        return self._replaced

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Start the first worker: ModelLoadError when it does not initialize."""
        with self._replacing:
            self._worker = self._start_worker()

    def running(self) -> WorkerProcess | LocalWorker:
        """The worker, started again if the last restart failed (ExecutionError if it fails
        again)."""
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

    def recover(
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
                self._replaced += 1
                worker.kill()
                try:
                    self._worker = self._start_worker()
                except BackendError as exc:
                    return ExecutionError(
                        f"{self._model.where()}: {what}; restarting the worker failed: {exc}"
                    )
        return ExecutionError(f"{self._model.where()}: {what}; the worker was restarted")

    @contextlib.asynccontextmanager
    async def channel(self) -> AsyncIterator[WorkerProcess | None]:
        """The worker, its channel held for a batch on the event loop (one at a time, and
        `_channel_free` clear meanwhile); None while a thread replaces it, when it is in
        process, or once closed."""
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

    def close(self) -> None:
        """No more restarts, and no more batches on the event loop."""
        with self._replacing:  # a batch on the event loop holds the channel now or never will
            self._closed = True

    def take(self, wait_s: float) -> WorkerProcess | LocalWorker | None:
        """After `close`: the worker, once a batch on the event loop has let its channel go
        (waiting at most `wait_s`), for the caller to finalize."""
        self._channel_free.wait(wait_s)
        with self._replacing:
            worker, self._worker = self._worker, None
        return worker

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
                self._replaced += 1
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
                    self._model.worker_spec,
                    self._answer_call,
                    self._server_request,
                    inline=self._settings.inline_execute,
                )
            answers = AskAnswers(self._cancelled_in, self._server_request)
            worker = WorkerProcess.start(
                self._model.worker_spec,
                time.monotonic_ns() + int(timeout_s * 1e9),
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
