"""What a python model's batch is on the server's side: the execute message it goes out as, and
the responses, errors and phases its worker's replies come back as (checked against the config).
Pure conversions: no channel, no thread, no event loop."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from backends.base import ExecutionResult, Outputs, Parameters, Response, TensorMap
from backends.device import host_tensors
from backends.errors import MODEL_ERROR_CODES, ExecutionError, ModelError
from backends.python._config import InstanceSpec, OutputSpec
from backends.python._outputs import check_outputs
from backends.python._pickling import unstack_rows

_log = logging.getLogger(__name__)

# How a decoupled execution hands each response to the event loop: (request index, outputs or
# the error that fails the request or None for a bare final flag, whether it is the final one).
ResponseSend = Callable[[int, Response | None, bool], None]


@dataclass(frozen=True, slots=True)
class Replies:
    """One instance's batches as messages, and its worker's replies as responses."""

    model: InstanceSpec
    outputs: tuple[OutputSpec, ...]  # the config's, which every response is checked against
    output_names: list[str] = field(init=False)  # what every execute message asks for

    def __post_init__(self) -> None:
        object.__setattr__(self, "output_names", [spec.name for spec in self.outputs])

    def execute_message(
        self, batch: int, requests: Sequence[TensorMap], parameters: Sequence[Parameters]
    ) -> tuple[Any, ...]:
        inputs = [dict(host_tensors(arrays)) for arrays in requests]  # device ones copied
        shown = [dict(p) for p in parameters] if parameters else []  # []: none has any
        return ("execute", batch, inputs, self.output_names, shown)

    def outcome(
        self,
        requests: Sequence[TensorMap],
        reply: tuple[Any, ...],
        start_ns: int,
        sent_ns: int,
    ) -> ExecutionResult:
        """A batch's responses from its reply ("done" or "failed")."""
        received_ns = time.monotonic_ns()
        rescheduled: frozenset[int] = frozenset()
        if reply[0] == "done" and type(reply[2]) is tuple:  # every request's outputs, stacked
            responses = self._stacked(reply[2], len(requests))
            execute_ns = int(reply[3])
        elif reply[0] == "done" and isinstance(reply[2], list) and len(reply[2]) == len(requests):
            rescheduled = frozenset(reply[4])
            responses = [
                {} if index in rescheduled else self.response(payload)
                for index, payload in enumerate(reply[2])
            ]
            execute_ns = int(reply[3])
        else:
            reason = str(reply[2]) if reply[0] == "failed" else f"unexpected reply {reply[0]!r}"
            responses = [ExecutionError(f"{self.model.where()}: {reason}") for _ in requests]
            execute_ns = received_ns - sent_ns
        return result(responses, start_ns, sent_ns, execute_ns, time.monotonic_ns(), rescheduled)

    def take(self, reply: tuple[Any, ...], streamed: Streamed, emit: ResponseSend) -> bool:
        """One of a decoupled batch's messages (a response, "done", or a failure, which ends
        every request still open: then False)."""
        if reply[0] == "response":
            _, _, index, payload, final = reply
            if not streamed.finished[index]:
                streamed.finished[index] = bool(final)
                emit(index, None if payload is None else self.response(payload), final)
        elif reply[0] == "done":
            streamed.returned = True
            streamed.execute_ns = int(reply[3])
            streamed.rescheduled = frozenset(reply[4])
            for index in streamed.rescheduled:  # their final flags come in a later batch
                streamed.finished[index] = True
        else:
            reason = str(reply[2]) if reply[0] == "failed" else f"unexpected {reply[0]!r}"
            finish(streamed.finished, emit, f"{self.model.where()}: {reason}")
            return False
        return True

    def response(self, payload: Any) -> Response:
        """One request's payload: its outputs (and parameters), or its error."""
        if isinstance(payload, dict):
            return check_outputs(self.model.name, self.outputs, payload)
        if isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[0], str):
            return _model_error(*payload)
        if isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[0], dict):
            checked = check_outputs(self.model.name, self.outputs, payload[0])
            parameters = _parameters(payload[1])
            if isinstance(checked, ExecutionError) or parameters is None:
                return checked if parameters is not None else self._malformed()
            return Outputs(checked, parameters)
        return self._malformed()

    def _stacked(self, stacked: Any, count: int) -> list[Response]:
        """The responses of `count` requests whose outputs came as one array per name
        (`stack_rows`): each request has the same names and dtypes, so they are checked once."""
        try:
            maps: list[dict[str, Any]] = unstack_rows(stacked)
        except ValueError:
            maps = []
        if len(maps) != count:
            return [self._malformed() for _ in range(count)]
        names, arrays, rows = stacked
        checked = check_outputs(
            self.model.name, self.outputs, dict(zip(names, arrays, strict=True))
        )
        if isinstance(checked, ExecutionError):
            return [ExecutionError(str(checked)) for _ in range(count)]
        if any(checked[name] is not array for name, array in zip(names, arrays, strict=True)):
            # Converted once for every request: a safe cast, or bytes items as objects.
            return list(unstack_rows((list(checked), list(checked.values()), rows)))
        return list(maps)

    def _malformed(self) -> ExecutionError:
        return ExecutionError(f"{self.model.where()}: the worker sent a malformed response")


@dataclass(slots=True)
class Streamed:
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
        return result(responses, self.start_ns, sent_ns, self.execute_ns, done_ns, rescheduled)


def finish(finished: list[bool], emit: ResponseSend, message: str) -> None:
    """A final error for every request of the batch that has not had its final response."""
    if all(finished):
        # Every request already ended (say, execute raised after sending the final flags):
        # nobody is left to receive the error, so the log is where it shows.
        _log.error("%s", message)
    for index, done in enumerate(finished):
        if not done:
            finished[index] = True
            emit(index, ExecutionError(message), True)


def result(
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


def _model_error(message: str, code: object) -> ModelError:
    """The model's TritonError, its message as Triton passes it, its code by name (an unknown
    one: INTERNAL, TritonError's own default)."""
    if isinstance(code, int) and 0 <= code < len(MODEL_ERROR_CODES):
        return ModelError(message, MODEL_ERROR_CODES[code])
    return ModelError(message)


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
