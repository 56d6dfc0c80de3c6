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

The queues, slots and backlog belong to the event loop: no locks. The policy and the selection
(`ready_batch`, a pure function of the slots and the time) live in `batching.sequence_policy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from batching.alarm import Alarm
from batching.errors import (
    BatcherClosedError,
    BatcherFaultError,
    DeadlineExceededError,
    SequenceError,
)
from batching.execution import Observer, checked, settle
from batching.inflight import InFlight
from batching.limiter import ExecutionGate
from batching.messages import (
    NO_PARAMETERS,
    ExecutionRecord,
    Executor,
    Parameters,
    RequestResult,
    SequenceStep,
    TensorMap,
)
from batching.sequence_policy import ControlKind, SequencePolicy, ready_batch
from batching.sequence_tensors import keep_state, null_feed, request_feed, step_parameters
from batching.supervise import supervise

_log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _Request:
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
class _Sequence:
    """The requests of one correlation id from one START; in a slot, or in the backlog."""

    correlation_id: int | str
    requests: deque[_Request] = field(default_factory=deque)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # input name -> last output
    last_ns: int = 0  # when its last request arrived or finished
    running: bool = False  # one of its requests is executing
    lane: _Lane | None = None
    slot: int = -1

    def ready(self) -> _Request | None:
        """Its next request, when one waits and none of its requests is executing."""
        return self.requests[0] if self.requests and not self.running else None


@dataclass(slots=True, eq=False)
class _Lane:
    """One instance and its slots."""

    executor: Executor
    slots: list[_Sequence | None]
    busy: bool = False
    retiring: asyncio.Future[Executor] | None = None  # set: take no new sequences

    def occupied(self) -> int:
        return sum(1 for sequence in self.slots if sequence is not None)


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
        self._lanes = [self._lane(executor) for executor in self._initial]
        self._sequences: dict[int | str, _Sequence] = {}  # started and not yet ended
        self._backlog: deque[_Sequence] = deque()  # waiting for a slot
        self._arrivals = 0
        self._anonymous = 0  # the last correlation id given to an iterative request without one
        self._wake = Alarm()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task = asyncio.create_task(
            supervise(self._name, self._run, self._fail_held), name=f"sequences:{self._name}"
        )

    @property
    def in_flight(self) -> int:
        return self._in_flight.count

    @property
    def queue_depth(self) -> int:
        return sum(len(s.requests) - s.running for s in self._all_sequences())

    @property
    def waits_for_batch_mates(self) -> bool:
        return False  # a sequence's requests run as they come: natural batching is dynamic's

    @property
    def waits_out_delay(self) -> bool:
        return False  # nor has it the adaptive delay

    @property
    def executor_count(self) -> int:
        return len(self._lanes)

    @property
    def policy(self) -> SequencePolicy:
        return self._policy

    def add_executor(self, executor: Executor) -> None:
        """Serve with one more instance: its slots take sequences from the backlog first."""
        lane = self._lane(executor)
        self._lanes.append(lane)
        for slot in range(len(lane.slots)):
            if not self._backlog:
                break
            self._seat(self._backlog.popleft(), lane, slot)
        self._wake.set()

    async def retire_executor(self) -> Executor:
        """Take one instance out of service once the sequences in its slots have ended (or
        were released idle), and hand it back for closing."""
        serving = [lane for lane in self._lanes if lane.retiring is None]
        if len(serving) <= 1:
            raise ValueError(f"sequence batcher '{self._name}' keeps at least one executor")
        lane = min(reversed(serving), key=_Lane.occupied)  # the emptiest, newest first
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
            sequence = self._own_sequence(sequence)
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
        target = self._sequences.get(correlation_id)
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
            target = self._begin(correlation_id)
        elif sequence.start:
            _log.warning(
                "sequence %s for model '%s' has a conflict: the previous sequence did not end "
                "before this sequence start; it ends early",
                correlation_id,
                model,
            )
        self._arrivals += 1
        request = _Request(
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
            self._sequences.pop(correlation_id, None)  # a new START begins a new sequence
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
                        self._release(target)
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
        for sequence in self._all_sequences():
            for request in sequence.requests:
                if not request.future.done():
                    request.future.set_exception(error)

    # Sequences and slots.

    def _lane(self, executor: Executor) -> _Lane:
        return _Lane(executor, [None] * self._policy.slots)

    def _own_sequence(self, step: SequenceStep | None) -> SequenceStep:
        """An iterative sequence model's request as the START of its own sequence: under its
        correlation id when it names one (not one still running), else under the next id no
        running sequence has (a string when the model reads its id as one)."""
        if step is not None and step.correlation_id:
            if step.correlation_id in self._sequences:
                raise SequenceError(
                    f"inference request for sequence {step.correlation_id} to model "
                    f"'{self._policy.model}': that sequence is still running; each request to "
                    "an iterative sequence model is a sequence of its own"
                )
            return SequenceStep(step.correlation_id, start=True)
        as_text = any(
            control.kind is ControlKind.CORRID and control.false.dtype == np.object_
            for control in self._policy.controls
        )
        while True:
            self._anonymous += 1
            correlation_id: int | str = str(self._anonymous) if as_text else self._anonymous
            if correlation_id not in self._sequences:
                return SequenceStep(correlation_id, start=True)

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

    def _begin(self, correlation_id: int | str) -> _Sequence:
        sequence = _Sequence(correlation_id)
        self._sequences[correlation_id] = sequence
        free = self._free_slot()
        if free is None:
            self._backlog.append(sequence)
        else:
            self._seat(sequence, *free)
        return sequence

    def _free_slot(self) -> tuple[_Lane, int] | None:
        """The lowest free slot of the least occupied instance that takes sequences."""
        best: tuple[_Lane, int] | None = None
        for lane in self._lanes:
            if lane.retiring is not None or None not in lane.slots:
                continue
            if best is None or lane.occupied() < best[0].occupied():
                best = (lane, lane.slots.index(None))
        return best

    def _seat(self, sequence: _Sequence, lane: _Lane, slot: int) -> None:
        lane.slots[slot] = sequence
        sequence.lane, sequence.slot = lane, slot

    def _release(self, sequence: _Sequence) -> None:
        """Free a sequence's slot (it ended or idled out) for the oldest backlogged one."""
        lane, slot = sequence.lane, sequence.slot
        if self._sequences.get(sequence.correlation_id) is sequence:
            del self._sequences[sequence.correlation_id]
        if lane is None:
            with contextlib.suppress(ValueError):
                self._backlog.remove(sequence)
            return
        lane.slots[slot] = None
        sequence.lane = None
        if lane.retiring is None and self._backlog:
            self._seat(self._backlog.popleft(), lane, slot)

    def _all_sequences(self) -> list[_Sequence]:
        slotted = [s for lane in self._lanes for s in lane.slots if s is not None]
        return [*slotted, *self._backlog]

    # The loop.

    async def _run(self) -> None:
        while True:
            now_ns = time.monotonic_ns()
            deadlines = [self._drop_expired(now_ns), self._reap(now_ns)]
            for lane in list(self._lanes):
                if lane.busy:
                    continue
                if lane.retiring is not None and lane.occupied() == 0:
                    self._lanes.remove(lane)
                    lane.retiring.set_result(lane.executor)
                    continue
                marks = [self._mark(sequence) for sequence in lane.slots]
                selection = ready_batch(marks, self._policy, now_ns)
                if selection.positions and self._may_run(lane):
                    self._dispatch(lane, selection.positions)
                elif not selection.positions and self._gate is not None:
                    self._gate.withdraw(lane.executor)
                # Not granted yet: the slots keep filling until the gate wakes this loop.
                deadlines.append(selection.wait_until_ns)
            await self._wake.sleep(now_ns, *deadlines)

    def _may_run(self, lane: _Lane) -> bool:
        return self._gate is None or self._gate.acquire(lane.executor, self._wake.set)

    def _mark(self, sequence: _Sequence | None) -> tuple[int, int] | None:
        request = None if sequence is None else sequence.ready()
        if request is None:
            return None
        return request.enqueue_ns, request.order

    def _fail_held(self) -> None:
        """After a fault of the loop (`supervise`): fail every request that waits (those
        executing finish), as `_drop_expired` fails an expired one."""
        for sequence in self._all_sequences():
            for request in list(sequence.requests):
                if sequence.running and sequence.requests[0] is request:
                    continue
                self._drop(
                    sequence,
                    request,
                    BatcherFaultError(
                        f"model '{self._policy.model}': the batcher failed (see the server's "
                        "log); the request was not executed"
                    ),
                )

    def _drop(self, sequence: _Sequence, request: _Request, error: Exception) -> None:
        """Fail a waiting request of `sequence` (not its executing one) and take it out."""
        sequence.requests.remove(request)
        if self._policy.iterative:  # the request was its whole sequence
            self._release(sequence)
        settle(request.future, error)

    def _drop_expired(self, now_ns: int) -> int | None:
        """Fail the waiting requests whose deadline passed; when the next one's is."""
        next_ns: int | None = None
        for sequence in self._all_sequences():
            for request in list(sequence.requests):
                due_ns = request.expires_ns
                if due_ns is None or (sequence.running and sequence.requests[0] is request):
                    continue
                if due_ns <= now_ns:
                    waited_ms = (now_ns - request.enqueue_ns) / 1e6
                    self._drop(
                        sequence,
                        request,
                        DeadlineExceededError(
                            f"model '{self._policy.model}': the request's deadline passed "
                            f"after {waited_ms:.1f} ms in the queue; it was not executed"
                        ),
                    )
                elif next_ns is None or due_ns < next_ns:
                    next_ns = due_ns
        return next_ns

    def _reap(self, now_ns: int) -> int | None:
        """Release the sequences idle past the limit; when the next one would be."""
        next_ns: int | None = None
        for sequence in self._all_sequences():
            if sequence.requests or sequence.running:
                continue
            due_ns = sequence.last_ns + self._policy.idle_ns
            if due_ns <= now_ns:
                _log.info(
                    "model '%s': sequence %s released after %d us idle",
                    self._policy.model,
                    sequence.correlation_id,
                    self._policy.idle_ns // 1000,
                )
                self._release(sequence)
            elif next_ns is None or due_ns < next_ns:
                next_ns = due_ns
        return next_ns

    def _dispatch(self, lane: _Lane, positions: tuple[int | None, ...]) -> None:
        batch: list[tuple[_Sequence, _Request] | None] = []
        for slot in positions:
            sequence = None if slot is None else lane.slots[slot]
            if sequence is None:
                batch.append(None)
                continue
            request = sequence.requests[0]
            sequence.running = True
            batch.append((sequence, request))
        lane.busy = True
        task = asyncio.create_task(self._execute(lane, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, lane: _Lane, batch: list[tuple[_Sequence, _Request] | None]) -> None:
        start_ns = time.monotonic_ns()
        real = [entry for entry in batch if entry is not None]
        template = real[0][1].inputs
        policy = self._policy
        feeds: list[TensorMap] = []
        parameters: list[Parameters] = []
        for entry in batch:
            if entry is None:
                feeds.append(null_feed(policy, template))
                parameters.append(NO_PARAMETERS)
                continue
            sequence, request = entry
            corrid, start, end = sequence.correlation_id, request.start, request.end
            feeds.append(request_feed(policy, request.inputs, corrid, start, end, sequence.state))
            parameters.append(step_parameters(request.parameters, corrid, start, end))
        record = ExecutionRecord(len(real), len(real), 0, 0, 0, succeeded=False)
        again: set[int] = set()  # id() of the requests the model rescheduled
        try:
            try:
                executor = lane.executor
                outcome = checked(
                    await executor.execute(feeds, parameters, False), executor, len(batch)
                )
            except Exception as exc:  # the loop never dies: fail only this batch
                _log.warning("model '%s': sequence batch failed: %s", self._policy.model, exc)
                self._report(record)
                for _, request in real:
                    settle(request.future, exc)
                return
            record = ExecutionRecord(
                len(real),
                len(real),
                outcome.compute_input_ns,
                outcome.compute_infer_ns,
                outcome.compute_output_ns,
                succeeded=True,
            )
            self._report(record)
            rescheduled = outcome.rescheduled if self._policy.iterative else frozenset()
            for index, (entry, response) in enumerate(zip(batch, outcome.responses, strict=True)):
                if entry is None:
                    continue
                sequence, request = entry
                spent = request.spent_ns
                spent[0] += start_ns - request.ready_ns
                spent[1] += outcome.compute_input_ns
                spent[2] += outcome.compute_infer_ns
                spent[3] += outcome.compute_output_ns
                if index in rescheduled:
                    again.add(id(request))
                    continue
                if isinstance(response, Exception):
                    settle(request.future, response)
                    continue
                outputs = keep_state(self._policy, sequence.state, response)
                settle(
                    request.future,
                    RequestResult(
                        outputs=outputs,
                        queue_ns=spent[0],
                        compute_input_ns=spent[1],
                        compute_infer_ns=spent[2],
                        compute_output_ns=spent[3],
                        batch_size=record.batch_size,
                        instance=lane.executor.name,
                    ),
                )
        finally:
            done_ns = time.monotonic_ns()
            for sequence, request in real:
                sequence.running = False
                sequence.last_ns = done_ns
                if id(request) in again and not request.future.done():
                    # Runs again, as its sequence's next request: no longer its START.
                    request.start = False
                    request.ready_ns = done_ns
                    continue
                if sequence.requests and sequence.requests[0] is request:
                    sequence.requests.popleft()
                if (request.end or self._policy.iterative) and not sequence.requests:
                    self._release(sequence)
            lane.busy = False
            if self._gate is not None:
                more = any(self._mark(sequence) is not None for sequence in lane.slots)
                self._gate.release(lane.executor, again=more)
            self._wake.set()

    def _report(self, record: ExecutionRecord) -> None:
        if self._observer is not None:
            self._observer(record)
