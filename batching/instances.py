"""`InstancePool`: a dynamic batcher's instances: which are idle, which of them may run now (the
rate limiter's gate), and those being taken out of service. Owned by the event loop."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from batching.limiter import ExecutionGate
from batching.messages import Executor


class InstancePool:
    """The instances one batcher feeds; `start` on the event loop before use."""

    def __init__(
        self, name: str, executors: Sequence[Executor], gate: ExecutionGate | None
    ) -> None:
        if not executors:
            raise ValueError(f"batcher '{name}' needs at least one executor")
        self._name = name
        self._executors = tuple(executors)
        self.gate = gate  # the rate limiter an instance asks before it runs (None: never waits)

    def start(self) -> None:
        self._idle: deque[Executor] = deque(self._executors)
        self._retiring: list[asyncio.Future[Executor]] = []  # waiting for a busy one to return

    @property
    def count(self) -> int:
        """Instances in service (one being retired counts until it has returned)."""
        return len(self._executors)

    @property
    def any_idle(self) -> bool:
        return bool(self._idle)

    def add(self, executor: Executor) -> None:
        """Serve with one more instance from now on."""
        self._executors = (*self._executors, executor)
        self._idle.append(executor)

    async def retire(self) -> Executor:
        """Take one instance out of service once it is idle, and hand it back for closing."""
        if len(self._executors) - len(self._retiring) <= 1:
            raise ValueError(f"batcher '{self._name}' keeps at least one executor")
        if self._idle:
            executor = self._idle.pop()
        else:
            returned: asyncio.Future[Executor] = asyncio.get_running_loop().create_future()
            self._retiring.append(returned)
            executor = await returned
        self._executors = tuple(e for e in self._executors if e is not executor)
        return executor

    def take(self, wake: Callable[[], None]) -> Executor | None:
        """An idle instance that may run now (the first, without a gate); None when the gate
        grants none yet: it calls `wake` once one may."""
        if self.gate is None:
            return self._idle.popleft()
        for executor in self._idle:
            if self.gate.acquire(executor, wake):
                self._idle.remove(executor)
                return executor
        return None

    def withdraw(self) -> None:
        """Nothing waits: the idle instances' asks to the gate are withdrawn."""
        if self.gate is not None:
            for executor in self._idle:
                self.gate.withdraw(executor)

    def give_back(self, executor: Executor, again: bool) -> bool:
        """`executor` has finished its batch (`again`: more requests wait); whether it is idle
        now (else a retirement took it)."""
        if self.gate is not None:
            self.gate.release(executor, again=again)
        if self._retiring:
            self._retiring.pop(0).set_result(executor)
            return False
        self._idle.append(executor)
        return True
