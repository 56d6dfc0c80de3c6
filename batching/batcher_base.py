"""`BatcherBase`: the dynamic batcher apart from a request's path through it (`Batcher`): its
parts built from the policy, its life (start, stop, instances added and retired, a fault of its
loop), the bookkeeping between its batches, and when a request expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from batching.alarm import Alarm
from batching.errors import BatcherClosedError, BatcherFaultError, DeadlineExceededError
from batching.execution import Observer, settle
from batching.inflight import InFlight
from batching.instances import InstancePool
from batching.limiter import ExecutionGate
from batching.messages import Executor
from batching.natural import NaturalBatching
from batching.policy import BatchPolicy, QueuePolicy
from batching.queue import Queued, RequestQueue
from batching.reach import Reach, still_growing
from batching.supervise import supervise
from batching.target import BatchTimes, TargetKeeper
from batching.turns import Turns

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class Quiet:
    """What the sleeping batch loop waits for, while an arrival cannot change its choice: its
    instances are all busy (`rows` None), or it waits out the delay of a batch of `rows`."""

    rows: int | None
    due_ns: int | None  # when its alarm rings anyway (None: only when woken)
    reach: int | None  # the adaptive delay's reach the wait was chosen with


class BatcherBase:
    """A dynamic batcher without its request path: `Batcher` adds `infer` and the batch loop."""

    _run: Callable[[], Coroutine[Any, Any, None]]  # the batch loop (`Batcher._run`)

    def __init__(
        self,
        name: str,
        executors: Sequence[Executor],
        policy: BatchPolicy,
        observer: Observer | None = None,
        gate: ExecutionGate | None = None,
        *,
        loop_cpu_ns: Callable[[], int] = time.thread_time_ns,
    ) -> None:
        """`loop_cpu_ns`: the CPU clock of the event loop's thread (natural batching's, and the
        adaptive delay's probes')."""
        self._name = name
        self._instances = InstancePool(name, executors, gate)
        self._policy = policy
        self._observer = observer
        self._closed = False
        self._in_flight = InFlight()  # requests accepted and not yet answered
        # Adaptive delay: the batch size that waiting out the whole delay reached lately.
        self._reach = Reach(policy.max_queue_delay_ns)
        self._loop_cpu_ns = loop_cpu_ns
        self._probe_start: tuple[int, int] | None = None  # a probe's wait: wall and loop CPU
        # Latency target: what batches are formed with, and the keeper that chooses it.
        # Every batch's time: a request that cannot finish before its deadline never runs.
        self._times = BatchTimes()
        self._horizon_ns = 0  # the shortest batch's mean time: nearer deadlines cannot be met
        self._turns = Turns()  # when a refused request is told to come back
        self._target = (
            TargetKeeper(name, policy, self._times, self._turns)
            if policy.latency_target_ns
            else None
        )
        self._forming = policy
        # Natural batching (batching.natural): a batcher without a delay measures the loop.
        self._natural = (
            NaturalBatching(policy, loop_cpu_ns)
            if policy.dynamic
            and policy.natural_batching
            and not policy.max_queue_delay_ns
            and self._target is None
            else None
        )
        # Whether an arrival may leave the loop asleep (see `Quiet`): one priority level, no
        # fair share, no latency target, no rate limiter, and batches of one shape.
        self._may_sleep_through = (
            policy.priority_levels == 1
            and not policy.fair_share
            and self._target is None
            and gate is None
            and not policy.equal_shape_inputs
        )
        self._quiet: Quiet | None = None

    async def start(self) -> None:
        # The loop, looked up once: each lookup reads the process id (a system call).
        self._loop = asyncio.get_running_loop()
        self._queue = RequestQueue(self._policy)
        self._instances.start()
        self._wake = Alarm()
        self._last_release: asyncio.Future[None] | None = None  # for preserve_ordering
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task = asyncio.create_task(
            supervise(self._name, self._run, self._fail_held), name=f"batcher:{self._name}"
        )

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def waits_for_batch_mates(self) -> bool:
        """Whether natural batching holds its batches for batch-mates now."""
        return self._natural is not None and self._natural.waiting

    @property
    def waits_out_delay(self) -> bool:
        """Whether the adaptive delay's batches wait out the whole delay now (its reach is
        delay-bound: batches still grew at the delay's end on a busy loop, `batching.reach`)."""
        return self._reach.bound

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered (queued or executing)."""
        return self._in_flight.count

    @property
    def policy(self) -> BatchPolicy:
        return self._policy

    @property
    def executor_count(self) -> int:
        return self._instances.count

    def add_executor(self, executor: Executor) -> None:
        """Serve with one more instance from now on."""
        self._instances.add(executor)
        self._wake.set()

    async def retire_executor(self) -> Executor:
        """Take one instance out of service once it is idle, and hand it back for closing."""
        return await self._instances.retire()

    async def stop(self, timeout_s: float) -> None:
        """Refuse new requests, let accepted ones finish (bounded), then stop the loop."""
        self._closed = True
        await self._in_flight.wait_idle(timeout_s)
        self._loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop_task
        self._wake.close()
        for request in self._queue.take(len(self._queue)):
            if not request.future.done():
                request.future.set_exception(
                    BatcherClosedError(f"model '{self._name}' stopped before the request ran")
                )

    def _fail_held(self) -> None:
        """After a fault of the loop (`supervise`): fail every queued request, and start the
        loop's own state anew."""
        for request in self._queue.take(len(self._queue)):
            settle(
                request.future,
                BatcherFaultError(
                    f"model '{self._name}': the batcher failed (see the server's log); the "
                    "request was not executed"
                ),
            )
        self._quiet = None
        self._probe_start = None

    def _expired(self, request: Queued, now_ns: int) -> DeadlineExceededError:
        waited_ms = (now_ns - request.candidate.enqueue_ns) / 1e6
        return DeadlineExceededError(
            f"model '{self._name}': the request's deadline passed (or would, before its batch "
            f"finished) after {waited_ms:.1f} ms in the queue; it was not executed"
        )

    def _probed(self, batch: list[Queued], size: int, delay_ns: int, now_ns: int) -> None:
        """The adaptive delay's probe ended with `batch` (`size` rows): tell the reach how far
        it grew, whether it was growing still, and how busy the loop was meanwhile."""
        newest_ns = max(request.candidate.enqueue_ns for request in batch)
        busy = None
        if self._probe_start is not None:
            started_ns, started_cpu_ns = self._probe_start
            self._probe_start = None
            if now_ns > started_ns:
                busy = (self._loop_cpu_ns() - started_cpu_ns) / (now_ns - started_ns)
        bound = self._reach.bound
        growing = still_growing(delay_ns, now_ns, newest_ns)
        self._reach.probed(size, now_ns, growing=growing, busy=busy)
        if self._reach.bound != bound:
            how = "wait out the delay" if self._reach.bound else "end at the reach"
            _log.debug("model '%s': batches %s (adaptive delay)", self._name, how)

    def _measure_load(self, natural: NaturalBatching, now_ns: int) -> None:
        """Natural batching: wait for batch-mates while the loop is saturated, not after."""
        forming = natural.forming(now_ns)
        if forming is not None:
            self._forming = forming
            how = "wait for batch-mates" if forming.adaptive_delay else "go at once"
            _log.debug("model '%s': batches %s (natural batching)", self._name, how)

    def _ordering(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None] | None]:
        """preserve_ordering: the release of the batch dispatched before this one, and this
        one's (None, None without it)."""
        if not self._policy.preserve_ordering:
            return None, None
        previous = self._last_release
        release: asyncio.Future[None] = self._loop.create_future()
        self._last_release = release
        return previous, release


def request_deadline_ns(
    queue_policy: QueuePolicy, now_ns: int, timeout_ns: int, deadline_ns: int
) -> int | None:
    """When a request arriving at `now_ns` expires (None: never): its caller's deadline, and
    its `timeout` parameter where the queue policy does not take it as Triton's queue timeout
    (allow_timeout_override), which would otherwise ignore it."""
    expires_ns = deadline_ns or None
    if timeout_ns > 0 and not queue_policy.allow_timeout_override:
        due_ns = now_ns + timeout_ns
        expires_ns = due_ns if expires_ns is None else min(expires_ns, due_ns)
    return expires_ns
