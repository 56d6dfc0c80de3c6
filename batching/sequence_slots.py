"""Where a sequence batcher's sequences are: its requests and sequences as data, each instance's
slots (`Lane`), and `SequenceSlots`, which starts a sequence in a free slot or the backlog and
releases it when it ends, idles out, or loses its waiting requests. Owned by the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from batching.errors import (
    BatcherFaultError,
    DeadlineExceededError,
    SequenceError,
    SequenceLostError,
)
from batching.execution import settle
from batching.messages import Executor, Parameters, RequestResult, SequenceStep, TensorMap
from batching.sequence_policy import ControlKind, SequencePolicy

_log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class SequenceRequest:
    """One request of a sequence, waiting for its turn or executing."""

    inputs: TensorMap
    parameters: Parameters
    start: bool
    end: bool
    enqueue_ns: int
    order: int  # arrival number, for OLDEST
    future: asyncio.Future[RequestResult]
    expires_ns: int | None = None  # its deadline: never executed from then on; None: none
    # Summed over the executions of a request its model rescheduled (an iterative sequence's):
    # time queued since it arrived or was rescheduled, and its batches' compute times.
    ready_ns: int = 0
    spent_ns: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # queue, in, infer, out


@dataclass(slots=True, eq=False)
class OpenSequence:
    """The requests of one correlation id from one START; in a slot, or in the backlog."""

    correlation_id: int | str
    requests: deque[SequenceRequest] = field(default_factory=deque)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # input name -> last output
    last_ns: int = 0  # when its last request arrived or finished
    running: bool = False  # one of its requests is executing
    # Its instance's `restarts` when its START ran: its requests run on that worker only.
    incarnation: int = 0
    lane: Lane | None = None
    slot: int = -1

    def ready(self) -> SequenceRequest | None:
        """Its next request, when one waits and none of its requests is executing."""
        return self.requests[0] if self.requests and not self.running else None


@dataclass(slots=True, eq=False)
class Lane:
    """One instance and its slots."""

    executor: Executor
    slots: list[OpenSequence | None]
    busy: bool = False
    retiring: asyncio.Future[Executor] | None = None  # set: take no new sequences

    def occupied(self) -> int:
        return sum(1 for sequence in self.slots if sequence is not None)


def mark(sequence: OpenSequence | None) -> tuple[int, int] | None:
    """A slot as `ready_batch` reads it: its ready request's enqueue time and arrival number."""
    request = None if sequence is None else sequence.ready()
    if request is None:
        return None
    return request.enqueue_ns, request.order


class SequenceSlots:
    """One model version's sequences: in its instances' slots (`lanes`) or in the backlog."""

    def __init__(self, policy: SequencePolicy, executors: Sequence[Executor]) -> None:
        self.policy = policy
        self.lanes = [self._lane(executor) for executor in executors]
        self.sequences: dict[int | str, OpenSequence] = {}  # started and not yet ended
        self.backlog: deque[OpenSequence] = deque()  # waiting for a slot
        self._anonymous = 0  # the last correlation id given to an iterative request without one

    def _lane(self, executor: Executor) -> Lane:
        return Lane(executor, [None] * self.policy.slots)

    def add(self, executor: Executor) -> None:
        """One more instance: its slots take sequences from the backlog first."""
        lane = self._lane(executor)
        self.lanes.append(lane)
        for slot in range(len(lane.slots)):
            if not self.backlog:
                break
            self._seat(self.backlog.popleft(), lane, slot)

    def own_sequence(self, step: SequenceStep | None) -> SequenceStep:
        """An iterative sequence model's request as the START of its own sequence: under its
        correlation id when it names one (not one still running), else under the next id no
        running sequence has (a string when the model reads its id as one)."""
        if step is not None and step.correlation_id:
            if step.correlation_id in self.sequences:
                raise SequenceError(
                    f"inference request for sequence {step.correlation_id} to model "
                    f"'{self.policy.model}': that sequence is still running; each request to "
                    "an iterative sequence model is a sequence of its own"
                )
            return SequenceStep(step.correlation_id, start=True)
        as_text = any(
            control.kind is ControlKind.CORRID and control.false.dtype == np.object_
            for control in self.policy.controls
        )
        while True:
            self._anonymous += 1
            correlation_id: int | str = str(self._anonymous) if as_text else self._anonymous
            if correlation_id not in self.sequences:
                return SequenceStep(correlation_id, start=True)

    def begin(self, correlation_id: int | str) -> OpenSequence:
        sequence = OpenSequence(correlation_id)
        self.sequences[correlation_id] = sequence
        free = self._free_slot()
        if free is None:
            self.backlog.append(sequence)
        else:
            self._seat(sequence, *free)
        return sequence

    def _free_slot(self) -> tuple[Lane, int] | None:
        """The lowest free slot of the least occupied instance that takes sequences."""
        best: tuple[Lane, int] | None = None
        for lane in self.lanes:
            if lane.retiring is not None or None not in lane.slots:
                continue
            if best is None or lane.occupied() < best[0].occupied():
                best = (lane, lane.slots.index(None))
        return best

    def _seat(self, sequence: OpenSequence, lane: Lane, slot: int) -> None:
        lane.slots[slot] = sequence
        sequence.lane, sequence.slot = lane, slot

    def release(self, sequence: OpenSequence) -> None:
        """Free a sequence's slot (it ended or idled out) for the oldest backlogged one."""
        lane, slot = sequence.lane, sequence.slot
        if self.sequences.get(sequence.correlation_id) is sequence:
            del self.sequences[sequence.correlation_id]
        if lane is None:
            with contextlib.suppress(ValueError):
                self.backlog.remove(sequence)
            return
        lane.slots[slot] = None
        sequence.lane = None
        if lane.retiring is None and self.backlog:
            self._seat(self.backlog.popleft(), lane, slot)

    def all_sequences(self) -> list[OpenSequence]:
        slotted = [s for lane in self.lanes for s in lane.slots if s is not None]
        return [*slotted, *self.backlog]

    # Requests and sequences that leave without running.

    def fail_held(self) -> None:
        """After a fault of the loop (`supervise`): fail every request that waits (those
        executing finish), as `drop_expired` fails an expired one."""
        for sequence in self.all_sequences():
            for request in list(sequence.requests):
                if sequence.running and sequence.requests[0] is request:
                    continue
                self.drop(
                    sequence,
                    request,
                    BatcherFaultError(
                        f"model '{self.policy.model}': the batcher failed (see the server's "
                        "log); the request was not executed"
                    ),
                )

    def drop(self, sequence: OpenSequence, request: SequenceRequest, error: Exception) -> None:
        """Fail a waiting request of `sequence` (not its executing one) and take it out."""
        sequence.requests.remove(request)
        if self.policy.iterative:  # the request was its whole sequence
            self.release(sequence)
        settle(request.future, error)

    def fail_lost(self, lane: Lane) -> None:
        """Fail the waiting requests of `lane`'s sequences that began on a worker its instance
        has since replaced (up to a new START), and release such a sequence at its END."""
        restarts = lane.executor.restarts
        for sequence in lane.slots:
            if sequence is None or sequence.running or sequence.incarnation == restarts:
                continue
            lost = list(itertools.takewhile(lambda r: not r.start, sequence.requests))
            if not lost:
                continue
            where = f"model '{self.policy.model}': sequence {sequence.correlation_id}"
            because = f"instance '{lane.executor.name}' was restarted since the sequence began"
            _log.warning("%s lost its state: %s", where, because)
            error = SequenceLostError(
                f"{where} lost its state: {because} (its worker failed); start the sequence "
                "again with the START flag"
            )
            for request in lost:
                self.drop(sequence, request, error)
            if lost[-1].end and not sequence.requests:
                self.release(sequence)

    def drop_expired(self, now_ns: int) -> int | None:
        """Fail the waiting requests whose deadline passed; when the next one's is."""
        next_ns: int | None = None
        for sequence in self.all_sequences():
            for request in list(sequence.requests):
                due_ns = request.expires_ns
                if due_ns is None or (sequence.running and sequence.requests[0] is request):
                    continue
                if due_ns <= now_ns:
                    waited_ms = (now_ns - request.enqueue_ns) / 1e6
                    self.drop(
                        sequence,
                        request,
                        DeadlineExceededError(
                            f"model '{self.policy.model}': the request's deadline passed "
                            f"after {waited_ms:.1f} ms in the queue; it was not executed"
                        ),
                    )
                elif next_ns is None or due_ns < next_ns:
                    next_ns = due_ns
        return next_ns

    def reap(self, now_ns: int) -> int | None:
        """Release the sequences idle past the limit; when the next one would be."""
        next_ns: int | None = None
        for sequence in self.all_sequences():
            if sequence.requests or sequence.running:
                continue
            due_ns = sequence.last_ns + self.policy.idle_ns
            if due_ns <= now_ns:
                _log.info(
                    "model '%s': sequence %s released after %d us idle",
                    self.policy.model,
                    sequence.correlation_id,
                    self.policy.idle_ns // 1000,
                )
                self.release(sequence)
            elif next_ns is None or due_ns < next_ns:
                next_ns = due_ns
        return next_ns
