"""`RequestQueue`: one FIFO per priority level with Triton's queue policies; synchronous.

Owned by the event loop's batcher, so it needs no locks. Requests leave it by being taken into
a batch, discarded (their caller went away), rejected on timeout or dropped at their deadline;
all are O(1) or lazy. A level of a fair-share model serves first the client class served least
lately.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from batching.errors import QueueFullError
from batching.fair import FairLine
from batching.messages import Parameters, TensorMap
from batching.policy import BatchPolicy, Candidate, TimeoutAction


@dataclass(slots=True, eq=False)
class Queued:
    """One request waiting for a batch."""

    inputs: TensorMap
    parameters: Parameters  # the request's parameters for the model (usually empty)
    candidate: Candidate
    level: int  # 1 is the highest priority
    deadline_ns: int | None  # queue timeout; None for never
    future: Any  # the caller's asyncio.Future, resolved by the batcher
    active: bool = True  # False once taken, discarded or rejected
    delayed: bool = False  # timed out under DELAY: served after its level's other requests
    device_outputs: bool = False  # its consumer reads on a device (an ensemble's next step)
    expires_ns: int | None = None  # its deadline: never executed from then on; None: none
    share: str = ""  # its fair-share class (the client's header value; "": the shared one)
    predicted_ns: float = 0.0  # its time in the batcher as the latency target predicted it
    in_turn: bool = False  # its answer may be handed over in turns of the event loop


def split_expired(requests: Iterable[Queued], now_ns: int) -> tuple[list[Queued], list[Queued]]:
    """(still wanted, expired by `now_ns`): a batch being assembled loses its expired ones."""
    live: list[Queued] = []
    expired: list[Queued] = []
    for request in requests:
        due = request.expires_ns
        (expired if due is not None and due <= now_ns else live).append(request)
    return live, expired


@dataclass(slots=True)
class _Level:
    policy_index: int
    waiting: deque[Queued] | FairLine[Queued] = field(default_factory=deque)
    delayed: deque[Queued] = field(default_factory=deque)
    size: int = 0  # active requests, for max_queue_size


class RequestQueue:
    """The queued requests of one model version, in service order."""

    def __init__(self, policy: BatchPolicy) -> None:
        self._policy = policy
        self._levels = [_Level(i) for i in range(policy.priority_levels)]
        if policy.fair_share:
            weights = dict(policy.share_weights)
            for level in self._levels:
                level.waiting = FairLine(lambda request: request.share, weights)
        self._deadlines: list[tuple[int, int, Queued]] = []  # heap of (deadline, seq, request)
        self._expiries: list[tuple[int, int, Queued]] = []  # heap of (expires, seq, request)
        self._seq = 0
        self._size = 0  # active requests over all levels (read on every arrival and batch)

    def __len__(self) -> int:
        return self._size

    def push(self, request: Queued) -> None:
        """Queue a request, or refuse it at once when its level is full."""
        level = self._levels[request.level - 1]
        limit = self._policy.queue_policies[level.policy_index].max_queue_size
        if limit and level.size >= limit:
            raise QueueFullError("Exceeds maximum queue size")
        level.waiting.append(request)
        level.size += 1
        self._size += 1
        if request.deadline_ns is not None:
            self._seq += 1
            heapq.heappush(self._deadlines, (request.deadline_ns, self._seq, request))
        if request.expires_ns is not None:
            self._seq += 1
            heapq.heappush(self._expiries, (request.expires_ns, self._seq, request))

    def discard(self, request: Queued) -> None:
        """Forget a request whose caller went away; it is skipped when reached."""
        if request.active:
            request.active = False
            self._levels[request.level - 1].size -= 1
            self._size -= 1

    def expire(self, now_ns: int) -> list[Queued]:
        """Apply timeouts due by `now_ns`; returns the REJECT ones, which have left the queue."""
        rejected = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            _, _, request = heapq.heappop(self._deadlines)
            if not request.active or request.delayed:
                continue
            level = self._levels[request.level - 1]
            action = self._policy.queue_policies[level.policy_index].timeout_action
            if action is TimeoutAction.DELAY:
                request.delayed = True
                level.delayed.append(request)
            else:
                self.discard(request)
                rejected.append(request)
        return rejected

    def drop_expired(self, now_ns: int) -> list[Queued]:
        """The requests whose own deadline passed by `now_ns`; they have left the queue."""
        dropped = []
        while self._expiries and self._expiries[0][0] <= now_ns:
            _, _, request = heapq.heappop(self._expiries)
            if request.active:
                self.discard(request)
                dropped.append(request)
        return dropped

    def next_deadline_ns(self, horizon_ns: int = 0) -> int | None:
        """The nearest queue timeout, or request deadline less `horizon_ns` (how long before
        its deadline a request is dropped), still to apply (None: none)."""
        while self._deadlines:
            _, _, request = self._deadlines[0]
            if request.active and not request.delayed:
                break
            heapq.heappop(self._deadlines)
        while self._expiries and not self._expiries[0][2].active:
            heapq.heappop(self._expiries)
        due = [self._deadlines[0][0]] if self._deadlines else []
        if self._expiries:
            due.append(self._expiries[0][0] - horizon_ns)
        return min(due) if due else None

    def __iter__(self) -> Iterator[Queued]:
        """Active requests in service order: by level, each level's waiting then delayed ones."""
        for level in self._levels:
            for request in level.waiting:
                if request.active and not request.delayed:
                    yield request
            for request in level.delayed:
                if request.active:
                    yield request

    def take(self, count: int) -> list[Queued]:
        """Remove and return the first `count` active requests in service order."""
        taken: list[Queued] = []
        for level in self._levels:
            for line in (level.waiting, level.delayed):
                while line and len(taken) < count:
                    request = line.popleft()
                    if not request.active or (line is level.waiting and request.delayed):
                        continue
                    request.active = False
                    level.size -= 1
                    self._size -= 1
                    taken.append(request)
                if len(taken) == count:
                    return taken
        return taken
