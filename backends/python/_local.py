"""`LocalWorker`: a python model run in the server's own process (opt-in: `convoy_in_process`).

model.py is imported here, under a module name of its instance's own, with a pb_utils of its
own; `execute` runs on the instance's thread with the batch's arrays (a copy only of a read-only
one: Triton's inputs are writable), and outputs come back as copies (the model may reuse its
buffers). No process, socket or pickle in between: the same `ModelServer` a worker process runs,
behind the interface of `WorkerProcess`.

What a separate process gives and this does not: a model that crashes the interpreter, leaks or
never returns takes the server with it (a hung execute is never killed, so the execute timeout
only bounds how long the instance waits for a decoupled model's responses); model code holds the
server's GIL while it runs Python, so only work that releases it (NumPy, ONNX Runtime, PyTorch)
or waits on I/O runs beside the server's own; and models share one interpreter (`sys.modules`,
`sys.path`: two models' sibling modules of the same name are one module).
"""

from __future__ import annotations

import inspect
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from backends.python._contract import ContractError
from backends.python._model_loading import initialize_model, load_utils, model_class
from backends.python._model_server import ModelServer
from backends.python._server_channel import WorkerFailure, WorkerRefused
from backends.python._settings import INLINE_EXECUTE_PARAMETER

# How the instance answers a model's questions (`exec`, a decoupled call's next response or
# cancel, `is_cancelled`): the question -> the ("called", call, ...) reply a worker would get.
CallAnswer = Callable[[tuple[Any, ...]], tuple[Any, ...]]
# How the instance answers its model's requests of custom metrics and model loading.
ServerAnswer = Callable[[dict[str, Any]], dict[str, Any]]

# `sys.modules` is the interpreter's: instances load in parallel, and each model.py must import
# the pb_utils installed for it, so one model.py is imported at a time.
_IMPORTING = threading.Lock()


class _Channel:
    """The `ModelServer`'s channel in this process: what it sends for a batch is queued for the
    instance's thread (a decoupled model's own threads send too); its questions never come
    here, the `ModelServer` has them answered on the spot."""

    def __init__(self) -> None:
        self.sent: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()

    def send(self, message: object) -> None:
        assert isinstance(message, tuple)
        self.sent.put(message)

    def receive(self) -> Any:
        raise EOFError("an in-process model's questions are answered on the spot")


class LocalWorker:
    """One in-process model instance; used by one thread at a time, as a `WorkerProcess`."""

    def __init__(self, server: ModelServer, channel: _Channel, decoupled: bool = False) -> None:
        self._server = server
        self._channel = channel
        self._decoupled = decoupled  # its execute runs on a thread of its own (see `send`)
        self.checks_readiness = server.checks_readiness  # the model defines `is_ready`

    @classmethod
    def start(
        cls,
        spec: dict[str, Any],
        answer_call: CallAnswer,
        answer_server: ServerAnswer,
        inline: bool = False,
    ) -> LocalWorker:
        """Import model.py and run initialize(spec['args']) here; WorkerRefused when model.py
        does not import or initialize raises, or when `inline` (execute may run on the event
        loop) meets an `async def execute`, which runs an event loop of its own. `answer_server`
        answers its requests of custom metrics and model loading."""
        module = "convoy_python_model_" + re.sub(r"\W", "_", spec["instance_name"])
        try:
            with _IMPORTING:
                utils = load_utils(spec.get("shared_dir"))
                utils._install_server_ask(lambda request, answered: answer_server(request))
                model_type = model_class(spec, module)
            if inline and inspect.iscoroutinefunction(getattr(model_type, "execute", None)):
                raise WorkerRefused(
                    f"{INLINE_EXECUTE_PARAMETER} runs execute on the server's event loop, where "
                    "an `async def execute` cannot run its own; remove the parameter"
                )
            model = initialize_model(spec, model_type)
        except ContractError as exc:
            raise WorkerRefused(str(exc)) from None
        channel = _Channel()
        server = ModelServer(channel, utils, model, spec, copy_outputs=True, answer=answer_call)
        return cls(server, channel, spec["decoupled"])

    def send(self, message: tuple[Any, ...], deadline_ns: int) -> None:
        """Run an ("execute", batch, inputs, output names, parameters) message now; a decoupled
        model's on a thread of its own, so that each response it sends reaches its stream while
        execute still runs (`replies` relays them), as from a worker."""
        assert message[0] == "execute"
        if not self._decoupled:
            self._server.execute(*message[1:])
            return
        name = f"convoy-decoupled-batch-{message[1]}"
        threading.Thread(
            target=self._server.execute, args=message[1:], name=name, daemon=True
        ).start()

    def replies(self, batch: int, deadline_ns: int) -> Iterator[tuple[Any, ...]]:
        """What the model sent about `batch`: execute has returned by now, but a decoupled
        model's threads may still be sending, until the deadline."""
        while True:
            remaining_s = (deadline_ns - time.monotonic_ns()) / 1e9
            try:
                message = self._channel.sent.get(timeout=max(remaining_s, 0.0))
            except queue.Empty:
                raise WorkerFailure("did not answer in time", timed_out=True) from None
            if len(message) > 1 and message[1] == batch:
                yield message

    def check_ready(self) -> bool:
        """The model's `is_ready()` answer, run on the calling thread (beside execute)."""
        return self._server.ready()

    def finalize(self, deadline_ns: int) -> str | None:
        """Run the model's finalize(); the error it reported, if any."""
        return self._server.finalize()

    def alive(self) -> bool:
        return True  # it lives and dies with the server

    def kill(self) -> None:
        """Nothing to end: the model lives in this process (a new one replaces it)."""
