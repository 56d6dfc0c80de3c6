"""`Batcher`: the one coroutine per model version that forms batches and feeds free instances.

The queue, the idle-instance pool and the wake-up event belong to the event loop, so no locks
are needed. Selection is `policy.next_batch` (pure); this module only waits and dispatches: it
holds a request's path (admission, the batch loop, a batch's run), and `batching.batcher_base`
the batcher's parts and life.
"""

from __future__ import annotations

import asyncio
import logging
import time

from batching.batcher_base import BatcherBase, Quiet, request_deadline_ns
from batching.errors import (
    BatcherClosedError,
    DeadlineCancelledError,
    DeadlineExceededError,
    QueueFullError,
    RequestTimeoutError,
)
from batching.execution import Handover, answer_in_turns, checked, settle
from batching.messages import (
    NO_PARAMETERS,
    ExecutionRecord,
    Executor,
    Parameters,
    RequestResult,
    SequenceStep,
    TensorMap,
)
from batching.policy import Candidate, grows_quietly, next_batch
from batching.queue import Queued, split_expired
from batching.target import request_share_ns

_log = logging.getLogger(__name__)

# A batch's answers taken in turn go out over at most this many turns of the event loop. mlp
# over HTTP, in process (2 cores): one answer a turn served 1.16x the rate of one turn for all
# at c = 8 but only 1.09x at c = 32, where each turn's own cost showed (CPU per request 1.25x);
# 8 turns served 1.15x and 1.27x at 0.97x-1.08x the CPU per request, 4 turns 1.11x and 1.23x.
_ANSWER_TURNS = 8


class Batcher(BatcherBase):
    """Queues requests for one model version and runs batches on the first free instance."""

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
        """Queue one request and wait for its result; cancelling the caller dequeues it.

        `priority` and `timeout_ns` are the request's scheduling parameters (0: the model's
        defaults); `parameters` go with it to the executor. `device_outputs`: the caller reads
        the outputs on a device; a batch gets device outputs when all its requests want them.
        `sequence` is ignored, as Triton's dynamic batcher ignores correlation ids.
        `deadline_ns` (monotonic; 0: none) is when its caller stops waiting: the request is
        never executed after it. `share` is its fair-share class. `in_turn`: after a batch
        that waited out its delay, its answer is handed over in turns of the event loop, a few
        a turn, after its batch's other answers (`batching.execution.answer_in_turns`).
        """
        if self._closed:
            raise BatcherClosedError(f"model '{self._name}' is no longer accepting requests")
        now_ns = time.monotonic_ns()
        policy = self._policy
        # Most requests carry no priority, timeout or deadline: those skip the rules' calls.
        level = policy.level_of(priority) if priority else policy.default_priority_level
        queue_policy = policy.queue_policies[level - 1]
        expires_ns = (
            request_deadline_ns(queue_policy, now_ns, timeout_ns, deadline_ns)
            if timeout_ns or deadline_ns
            else None
        )
        if expires_ns is not None and expires_ns <= now_ns + self._horizon_ns:
            raise DeadlineExceededError(
                f"model '{self._name}': the request's deadline had passed when it arrived, or "
                "would before a batch could finish; it was not executed"
            )
        predicted_ns = 0.0
        if self._target is not None:  # raises LatencyTargetError at once when over it
            predicted_ns = self._target.admit(
                now_ns, len(self._queue), self._instances.any_idle, self._instances.count
            )
        request = Queued(
            inputs=inputs,
            parameters=parameters,
            candidate=Candidate(
                max(batch_size, 1),
                now_ns,
                policy.shape_key(inputs) if policy.equal_shape_inputs else (),
            ),
            level=level,
            deadline_ns=(
                queue_policy.deadline_ns(now_ns, timeout_ns)
                if timeout_ns or queue_policy.default_timeout_ns
                else None
            ),
            future=self._loop.create_future(),
            device_outputs=device_outputs,
            expires_ns=expires_ns,
            share=share,
            predicted_ns=predicted_ns,
            in_turn=in_turn,
        )
        if (
            not policy.dynamic
            and self._instances.any_idle
            and self._instances.gate is None
            and not len(self._queue)
        ):
            # Without dynamic batching every request runs alone: with nothing queued before it
            # and an instance free, it runs in the caller's task, without a trip through the
            # batcher's loop and a task of its own. (A dynamic batcher gathers the requests
            # that arrive together even without a delay, so its requests always queue.)
            return await self._run_alone(request)
        try:
            self._queue.push(request)
        except QueueFullError as exc:  # the level is full: back once a request's share has run
            share_ns = request_share_ns(self._times, policy.max_batch_size, self._instances.count)
            exc.retry_after_ns = self._turns.tell(now_ns, now_ns + share_ns, share_ns)
            raise
        if not self._sleeps_through(request):
            self._wake.set()
        with self._in_flight.counted():
            try:
                result: RequestResult = await request.future
                return result
            except asyncio.CancelledError:
                queued = request.active  # False once executing: the result is then dropped
                self._queue.discard(request)
                self._wake.set()  # the batch it waited in is smaller: the loop looks again
                expires_ns, now_ns = request.expires_ns, time.monotonic_ns()
                if queued and expires_ns is not None and now_ns >= expires_ns - self._horizon_ns:
                    # Its deadline, not its caller, ended it: the loop would have dropped it.
                    raise DeadlineCancelledError(self._expired(request, now_ns)) from None
                raise

    def _sleeps_through(self, request: Queued) -> bool:
        """Whether the loop may sleep on after `request` joined the queue: it is asleep in a
        `Quiet` state, the request's deadlines come after the loop's alarm, and it does not
        complete the batch the loop waits for (its rows are then counted in)."""
        quiet = self._quiet
        if quiet is None:
            return False
        due_ns = quiet.due_ns
        for request_due_ns in (
            request.deadline_ns,
            None if request.expires_ns is None else request.expires_ns - self._horizon_ns,
        ):
            if request_due_ns is not None and (due_ns is None or request_due_ns < due_ns):
                return False
        if quiet.rows is None:
            return True
        rows = request.candidate.batch_size
        if not grows_quietly(self._forming, quiet.rows, rows, quiet.reach):
            return False
        quiet.rows += rows
        return True

    async def _run_alone(self, request: Queued) -> RequestResult:
        request.active = False  # never queued: nothing to discard if the caller goes away
        with self._in_flight.counted():
            executor = self._instances.take(self._wake.set)
            assert executor is not None  # an idle instance, and no gate to ask
            await self._execute(executor, [request], *self._ordering())
        result: RequestResult = request.future.result()  # raises the request's error
        return result

    async def _run(self) -> None:
        while True:
            now_ns = time.monotonic_ns()
            for request in self._queue.expire(now_ns):
                if not request.future.done():
                    request.future.set_exception(RequestTimeoutError("Request timeout expired"))
            horizon_ns = self._horizon_ns
            for request in self._queue.drop_expired(now_ns + horizon_ns):
                settle(request.future, self._expired(request, now_ns))
            wait_until_ns = None
            quiet_rows: int | None = None  # the rows of a batch waited for (None: busy)
            reach = None
            if self._instances.any_idle and len(self._queue):
                if self._natural is not None:
                    self._measure_load(self._natural, now_ns)
                forming = self._forming
                reach = self._reach.known(now_ns) if forming.adaptive_delay else None
                decision = next_batch(
                    (request.candidate for request in self._queue), forming, now_ns, reach
                )
                executor = self._instances.take(self._wake.set) if decision.count else None
                if executor is not None:
                    # Dispatched first: the instance taken is never left out of service.
                    batch = self._queue.take(decision.count)
                    self._dispatch(batch, executor, decision.waited)
                    if forming.adaptive_delay and reach is None:
                        self._probed(batch, decision.size, forming.max_queue_delay_ns, now_ns)
                    if self._natural is not None:
                        self._natural.sent(decision.size, self._in_flight.count)
                    continue
                # Not granted yet: the batch keeps growing until the gate wakes this loop.
                wait_until_ns = decision.wait_until_ns
                quiet_rows = decision.size
                if (
                    reach is None
                    and forming.adaptive_delay
                    and self._probe_start is None
                    and not self._reach.bound
                ):  # a probe begins its wait: is the loop reading requests meanwhile?
                    self._probe_start = (now_ns, self._loop_cpu_ns())
            elif not len(self._queue):
                self._instances.withdraw()
            deadline_ns = self._queue.next_deadline_ns(horizon_ns)
            busy = not self._instances.any_idle
            if self._may_sleep_through and (busy or wait_until_ns is not None):
                due = [d for d in (wait_until_ns, deadline_ns) if d is not None]
                self._quiet = Quiet(quiet_rows, min(due) if due else None, reach)
            try:
                await self._wake.sleep(now_ns, wait_until_ns, deadline_ns)
            finally:
                self._quiet = None

    def _dispatch(self, batch: list[Queued], executor: Executor, waited: bool) -> None:
        task = self._loop.create_task(self._execute(executor, batch, *self._ordering(), waited))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(
        self,
        executor: Executor,
        batch: list[Queued],
        previous: asyncio.Future[None] | None,
        release: asyncio.Future[None] | None,
        waited: bool = False,
    ) -> None:
        start_ns = time.monotonic_ns()
        # It may have waited for an instance or the rate limiter since it was formed.
        batch, expired = split_expired(batch, start_ns + self._horizon_ns)
        for request in expired:
            settle(request.future, self._expired(request, start_ns))
        # One pass over the batch for what the executor takes (this runs for every batch).
        rows = 0
        inputs = []
        parameters = []
        device_outputs = True
        for request in batch:
            rows += request.candidate.batch_size
            inputs.append(request.inputs)
            parameters.append(request.parameters)
            device_outputs = device_outputs and request.device_outputs
        try:
            if not batch:
                if previous is not None:
                    await asyncio.shield(previous)
                return
            if self._target is not None:
                self._target.started(executor, start_ns, rows)
            try:
                outcome = checked(
                    await executor.execute(
                        inputs, parameters if any(parameters) else (), device_outputs
                    ),
                    executor,
                    len(batch),
                )
            except Exception as exc:  # the batch loop never dies: fail only this batch
                _log.warning("model '%s': batch of %d failed: %s", self._name, rows, exc)
                if self._observer is not None:
                    self._observer(ExecutionRecord(rows, len(batch), 0, 0, 0, False))
                if previous is not None:
                    await asyncio.shield(previous)
                for request in batch:
                    settle(request.future, exc)
                return
            input_ns, infer_ns, output_ns = (
                outcome.compute_input_ns,
                outcome.compute_infer_ns,
                outcome.compute_output_ns,
            )
            if self._observer is not None:
                self._observer(
                    ExecutionRecord(rows, len(batch), input_ns, infer_ns, output_ns, True)
                )
            done_ns = time.monotonic_ns()
            self._times.record(rows, done_ns - start_ns)
            self._horizon_ns = int(self._times.predict_ns(1, spread=0.0) or 0)
            if self._target is not None:
                self._forming = self._target.measured(done_ns)
            if previous is not None:  # preserve_ordering: after the batch dispatched before
                await asyncio.shield(previous)
            name = executor.name
            if self._target is not None:  # each answer against its prediction
                for request in batch:
                    self._target.answered(
                        done_ns - request.candidate.enqueue_ns, request.predicted_ns
                    )
            # Answers taken in turn go out a few per loop turn after a batch that waited out
            # its delay (`answer_in_turns`); after one sent at a size, and under
            # preserve_ordering (before the next batch's answers), every answer goes now: a
            # batch sent at a size waits for its last request, not its first, and turns would
            # only delay that one. The front end asks for turns where its write is immediate
            # (HTTP); gRPC's writes complete through its poller, and spread over turns they
            # cost more CPU than they gained.
            in_turn: list[Handover] = []
            for request, response in zip(batch, outcome.responses, strict=True):
                future = request.future
                if future.done():  # a cancelled caller's result is dropped
                    continue
                answer = (
                    response
                    if isinstance(response, Exception)
                    else RequestResult(
                        response,
                        start_ns - request.candidate.enqueue_ns,
                        input_ns,
                        infer_ns,
                        output_ns,
                        rows,
                        name,
                    )
                )
                if request.in_turn and waited and release is None:
                    in_turn.append((future, answer))
                else:
                    settle(future, answer)
            if in_turn:
                per_turn = -(-len(in_turn) // _ANSWER_TURNS)  # rounded up
                answer_in_turns(self._loop, iter(in_turn), per_turn)
        finally:
            if self._target is not None:
                self._target.finished(executor)
            if release is not None:
                release.set_result(None)
            if self._instances.give_back(executor, again=bool(len(self._queue))):
                self._quiet = None  # the loop may sleep on, but the next arrival wakes it
            if len(self._queue) or self._instances.gate is not None:  # else nothing waits
                self._wake.set()
