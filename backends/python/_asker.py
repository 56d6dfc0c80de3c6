"""`Asker`: what a python model asks the server while its batch's execute runs (`exec`, and in
process `is_cancelled`), each question answered ("called", call, ...). Runs in the worker too, so
it imports only its siblings.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from ._contract import wire_array


class Channel(Protocol):
    """How a `ModelServer` talks with the server: a socket in a worker process, or calls in the
    server's own process (`_local.py`)."""

    def send(self, message: object) -> None: ...

    def receive(self) -> Any: ...


class Asker:
    """A `ModelServer`'s questions to the server: through its channel in a worker, where any
    number of threads may ask at once while execute runs, or answered on the asking thread by
    `answer` in the server's process."""

    def __init__(
        self,
        channel: Channel,
        utils: ModuleType,
        answer: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
    ) -> None:
        self._channel = channel
        self._utils = utils
        # In process: each question answered on the asking thread (None: through the channel).
        self._answer = answer
        self._batch: int | None = None  # the batch whose execute runs now (calls belong to it)
        self._calls = itertools.count()
        # Questions in a worker: several threads may wait for answers at once (a model's
        # `async_exec` calls run side by side); one of them at a time reads the channel and
        # hands each answer to its asker.
        self._questions = threading.Condition()
        self._answers: dict[int, tuple[Any, ...]] = {}
        self._reading = False  # a waiting asker reads the channel now
        self._asking = 0  # questions sent and not yet answered

    def begin(self, batch: int) -> None:
        """Execute runs `batch` now: the model's calls belong to it."""
        self._batch = batch

    def end(self) -> None:
        """Execute returned: the batch takes no more questions once those asked are answered."""
        with self._questions:  # in a worker, questions of other threads are answered first
            while self._asking and self._answer is None:
                self._questions.wait()
            self._batch = None

    def call_model(
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
        arrays = {tensor.name(): wire_array(tensor.as_numpy()) for tensor in inputs}
        names = list(output_names)
        call, reply = self.ask(
            "call", batch, None, model, version, arrays, names, parameters, decoupled
        )
        if not decoupled or reply[2] is not True:  # not opened: the call's error
            return self._response(reply[2])

        def take() -> tuple[Any, bool]:
            answer = self.ask("next", batch, call)[1]
            return self._response(answer[2]), bool(answer[3])

        def cancel() -> None:
            self.ask("cancel", batch, call)

        return pb.ResponseIterator(take, cancel)

    def ask(
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
        if isinstance(payload, str):  # a failure of the call itself
            return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(payload))
        if isinstance(payload, tuple) and isinstance(payload[0], str):  # the called model's
            message, code = payload
            return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message, code))
        outputs: dict[str, np.ndarray] = payload[0] if isinstance(payload, tuple) else payload
        answered: str = payload[1] if isinstance(payload, tuple) else "{}"
        return pb.InferenceResponse(
            output_tensors=[pb.Tensor(name, array) for name, array in outputs.items()],
            parameters=json.loads(answered),
        )
