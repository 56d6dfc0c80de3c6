"""`SequenceBatcher`: Triton's sequence batcher, for stateful models.

Every sequence (the requests of one correlation id, from START to END) is bound to one slot
of one instance for its life; an instance runs one batch at a time, taking at most one request
per slot, so a sequence's requests run in order, one at a time. Each request reaches the model
with the config's control tensors (START, END, READY, CORRID) and, for implicit state, the
state the sequence's previous request produced. Sequences that find every slot taken wait in a
backlog; a sequence idle for `idle_ns` is released and its slot freed.

An iterative sequence model (`iterative`, Triton's `iterative_sequence`) takes each request as
a whole sequence: one that names no correlation id gets one of its own, and the model may run it
again in a later batch (it reschedules it) as often as it likes, until it answers; the sequence
ends then. New and rescheduled requests share batches: continuous batching.

Two strategies choose what runs: `DIRECT` runs every slot that has a request, slot `i` at batch
position `i` (empty positions get a null request with READY false), once enough slots are ready
or the oldest request has waited `max_queue_delay_ns`; `OLDEST` batches the oldest requests of
the instance's candidate sequences like the dynamic batcher, without padding.

The sequences, slots and backlog (`batching.sequence_slots`) belong to the event loop: no
locks. The policy and the selection (`ready_batch`, a pure function of the slots and the time)
live in `batching.sequence_policy`; a batch's run, in `batching.sequence_execution`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

import numpy as np

from batching.alarm import Alarm
from batching.errors import BatcherClosedError, DeadlineExceededError, SequenceError
from batching.execution import Observer
from batching.inflight import InFlight
from batching.limiter import ExecutionGate
from batching.messages import (
    NO_PARAMETERS,
    Executor,
    Parameters,
    RequestResult,
    SequenceStep,
    TensorMap,
)
from batching.sequence_execution import execute_batch
from batching.sequence_policy import ControlKind, SequencePolicy, ready_batch
from batching.sequence_slots import Lane, OpenSequence, SequenceRequest, SequenceSlots, mark
from batching.supervise import supervise

_log = logging.getLogger(__name__)


class SequenceBatcher:
    """Schedules one stateful model version's sequences over its instances."""

    def __init__(
        self,
        name: str,
        executors: Sequence[Executor],
        policy: SequencePolicy,
        observer: Observer | None = None,
        gate: ExecutionGate | None = None,
    ) -> None:
        if not executors:
            raise ValueError(f"sequence batcher '{name}' needs at least one executor")
        self._name = name
        self._initial = tuple(executors)
        self._policy = policy
        self._observer = observer
        self._gate = gate  # the rate limiter an instance asks before it runs (None: never waits)
        self._closed = False
        self._in_flight = InFlight()

    async def start(self) -> None:
        self._slots = SequenceSlots(self._policy, self._initial)
        self._arrivals = 0
        self._wake = Alarm()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task = asyncio.create_task(
            supervise(self._name, self._run, self._slots.fail_held), name=f"sequences:{self._name}"
        )

    @property
    def in_flight(self) -> int:
        return self._in_flight.count

    @property
    def queue_depth(self) -> int:
        return sum(len(s.requests) - s.running for s in self._slots.all_sequences())

    @property
    def waits_for_batch_mates(self) -> bool:
        return False  # a sequence's requests run as they come: natural batching is dynamic's

    @property
    def waits_out_delay(self) -> bool:
        return False  # nor has it the adaptive delay

    @property
    def executor_count(self) -> int:
        return len(self._slots.lanes)

    @property
    def policy(self) -> SequencePolicy:
        return self._policy

    def add_executor(self, executor: Executor) -> None:
        """Serve with one more instance: its slots take sequences from the backlog first."""
        self._slots.add(executor)
        self._wake.set()

    async def retire_executor(self) -> Executor:
        """Take one instance out of service once the sequences in its slots have ended (or
        were released idle), and hand it back for closing."""
        serving = [lane for lane in self._slots.lanes if lane.retiring is None]
        if len(serving) <= 1:
            raise ValueError(f"sequence batcher '{self._name}' keeps at least one executor")
        lane = min(reversed(serving), key=Lane.occupied)  # the emptiest, newest first
        lane.retiring = asyncio.get_running_loop().create_future()
        self._wake.set()
        return await lane.retiring

    async def infer(
        self,
        inputs: TensorMap,
        batch_size: int,
        priority: int = 0,
        timeout_ns: int = 0,
        parameters: Parameters = NO_PARAMETERS,
        device_outputs: bool = False,
        sequence: SequenceStep | None = None,
        *,
        deadline_ns: int = 0,
        share: str = "",
        in_turn: bool = False,
    ) -> RequestResult:
        """Queue one request of a sequence and wait for its result; cancelling the caller
        takes a request that has not started out of its sequence. A request still waiting at
        its deadline (`deadline_ns`, or its `timeout` from arrival) leaves its sequence
        unexecuted; `share` and `in_turn` are ignored (a sequence keeps its slot). An
        iterative sequence model's request is a sequence of its own, whatever its flags say."""
        model = self._policy.model
        if self._closed:
            raise BatcherClosedError(f"model '{model}' is no longer accepting requests")
        if self._policy.iterative:
            sequence = self._slots.own_sequence(sequence)
        if sequence is None or not sequence.correlation_id:
            raise SequenceError(
                f"inference request to model '{model}' must specify a non-zero or non-empty "
                "correlation ID"
            )
        if batch_size > 1:
            raise SequenceError(
                f"inference request to model '{model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        correlation_id = sequence.correlation_id
        target = self._slots.sequences.get(correlation_id)
        if target is None and not sequence.start:
            raise SequenceError(
                f"inference request for sequence {correlation_id} to model '{model}' must "
                "specify the START flag on the first request of the sequence"
            )
        self._check_corrid(correlation_id)
        now_ns = time.monotonic_ns()
        expires_ns = deadline_ns or None
        if timeout_ns > 0:
            due_ns = now_ns + timeout_ns
            expires_ns = due_ns if expires_ns is None else min(expires_ns, due_ns)
        if expires_ns is not None and expires_ns <= now_ns:
            raise DeadlineExceededError(
                f"model '{model}': the request's deadline had passed when it arrived; it was "
                "not executed"
            )
        if target is None:
            target = self._slots.begin(correlation_id)
        elif sequence.start:
            _log.warning(
                "sequence %s for model '%s' has a conflict: the previous sequence did not end "
                "before this sequence start; it ends early",
                correlation_id,
                model,
            )
        self._arrivals += 1
        request = SequenceRequest(
            inputs,
            parameters,
            sequence.start,
            sequence.end,
            now_ns,
            self._arrivals,
            asyncio.get_running_loop().create_future(),
            expires_ns,
            now_ns,
        )
        target.requests.append(request)
        target.last_ns = now_ns
        if sequence.end:
            self._slots.sequences.pop(correlation_id, None)  # a new START begins a new sequence
        self._wake.set()
        with self._in_flight.counted():
            try:
                return await request.future
            except asyncio.CancelledError:
                executing = target.running and target.requests[0] is request
                if not executing:  # it never runs; an executing one's result is dropped
                    with contextlib.suppress(ValueError):
                        target.requests.remove(request)
                    if self._policy.iterative:
                        self._slots.release(target)
                    self._wake.set()
                raise

    async def stop(self, timeout_s: float) -> None:
        """Refuse new requests, let accepted ones finish (bounded), then stop the loop and
        fail what is left: their sequences end with the version."""
        self._closed = True
        await self._in_flight.wait_idle(timeout_s)
        self._loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop_task
        self._wake.close()
        error = BatcherClosedError(f"model '{self._policy.model}' stopped before the request ran")
        for sequence in self._slots.all_sequences():
            for request in sequence.requests:
                if not request.future.done():
                    request.future.set_exception(error)

    def _check_corrid(self, correlation_id: int | str) -> None:
        for control in self._policy.controls:
            if control.kind is not ControlKind.CORRID:
                continue
            if isinstance(correlation_id, str) != (control.false.dtype == np.object_):
                kind = "string" if isinstance(correlation_id, str) else "integer"
                raise SequenceError(
                    f"inference request for sequence {correlation_id} to model "
                    f"'{self._policy.model}' has a {kind} correlation ID, but its "
                    f"CONTROL_SEQUENCE_CORRID input '{control.name}' is {control.false.dtype}"
                )

    # The loop.

    async def _run(self) -> None:
        while True:
            now_ns = time.monotonic_ns()
            deadlines = [self._slots.drop_expired(now_ns), self._slots.reap(now_ns)]
            for lane in list(self._slots.lanes):
                if lane.busy:
                    continue
                if lane.retiring is not None and lane.occupied() == 0:
                    self._slots.lanes.remove(lane)
                    lane.retiring.set_result(lane.executor)
                    continue
                if lane.executor.restarts:
                    self._slots.fail_lost(lane)
                marks = [mark(sequence) for sequence in lane.slots]
                selection = ready_batch(marks, self._policy, now_ns)
                if selection.positions and self._may_run(lane):
                    self._dispatch(lane, selection.positions)
                elif not selection.positions and self._gate is not None:
                    self._gate.withdraw(lane.executor)
                # Not granted yet: the slots keep filling until the gate wakes this loop.
                deadlines.append(selection.wait_until_ns)
            await self._wake.sleep(now_ns, *deadlines)

    def _may_run(self, lane: Lane) -> bool:
        return self._gate is None or self._gate.acquire(lane.executor, self._wake.set)

    def _dispatch(self, lane: Lane, positions: tuple[int | None, ...]) -> None:
        batch: list[tuple[OpenSequence, SequenceRequest] | None] = []
        for slot in positions:
            sequence = None if slot is None else lane.slots[slot]
            if sequence is None:
                batch.append(None)
                continue
            request = sequence.requests[0]
            if request.start:
                sequence.incarnation = lane.executor.restarts
            sequence.running = True
            batch.append((sequence, request))
        lane.busy = True
        task = asyncio.create_task(
            execute_batch(lane, batch, self._slots, self._observer, self._gate, self._wake)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
