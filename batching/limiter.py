"""`RateLimiter`: the one owner of every model's rate-limiter resources, on the event loop (no
locks). The batchers call it as their `ExecutionGate`: an idle instance with a batch ready asks
to run (`acquire`), and runs once its resources are granted; they are held for the execution and
`release`d after it. Who runs next is `rate_limit.grants` (pure); this module keeps the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from batching.errors import PolicyError
from batching.rate_limit import (
    Contender,
    ExplicitCount,
    Needs,
    Resource,
    grants,
    resource_counts,
    too_large,
)


@dataclass(slots=True)
class ResourceWait:
    """How long one model version's instances waited for resources with a batch ready."""

    count: int = 0  # waits that ended in a grant
    total_ns: int = 0


@dataclass(slots=True)
class _Instance:
    needs: Needs
    wait: ResourceWait  # its model version's, shared by its instances
    executions: int = 0
    waiting_since_ns: int | None = None  # None: not waiting
    wake: Callable[[], None] | None = None  # its batcher's, to call on a grant
    granted: bool = False  # its resources are held for it (reserved or executing)


@dataclass(slots=True)
class RateLimiter:
    """Triton's `--rate-limit execution_count`: instances run only when their resources are
    free; the counts follow the instances loaded (or the explicit `--rate-limit-resource`)."""

    explicit: Sequence[ExplicitCount] = ()
    _instances: dict[int, _Instance] = field(default_factory=dict)  # by id() of the executor
    _counts: dict[Resource, int] = field(default_factory=dict)
    _in_use: dict[Resource, int] = field(default_factory=dict)

    def check(self, needs: Needs, where: str) -> None:
        """PolicyError if an instance needs more than an explicit count gives."""
        reason = too_large(needs, self.explicit)
        if reason is not None:
            raise PolicyError(f"{where}: {reason}")

    def register(self, executor: object, needs: Needs, wait: ResourceWait) -> None:
        """An instance from now on, until it is garbage (its version unloaded, or the instance
        retired); `wait` is its model version's (one per version). On the event loop."""
        ident, instance = id(executor), _Instance(needs, wait)
        self._instances[ident] = instance
        self._recount()
        loop = asyncio.get_running_loop()

        def forget() -> None:  # may run on any thread: the last reference may drop anywhere
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to free
                loop.call_soon_threadsafe(self._forget, ident, instance)

        weakref.finalize(executor, forget)

    def _forget(self, ident: int, instance: _Instance) -> None:
        if self._instances.get(ident) is not instance:
            return  # already gone (and the id may be another executor's by now)
        del self._instances[ident]
        if instance.granted:
            self._give_back(instance)
        self._recount()
        self._schedule()

    def acquire(self, executor: object, wake: Callable[[], None]) -> bool:
        """Whether this idle instance may run a batch now (its resources are then held for it);
        if not, it waits and `wake` is called once they are granted."""
        instance = self._instances.get(id(executor))
        if instance is None or not instance.needs.resources or instance.granted:
            return True
        if instance.waiting_since_ns is None:
            instance.waiting_since_ns = time.monotonic_ns()
        instance.wake = wake
        self._schedule(asking=instance)
        return instance.granted

    def withdraw(self, executor: object) -> None:
        """This idle instance has nothing to run after all: it stops waiting, and a grant it
        has not used goes back."""
        instance = self._instances.get(id(executor))
        if instance is None:
            return
        instance.waiting_since_ns = None
        if instance.granted:
            self._give_back(instance)
            self._schedule()

    def release(self, executor: object, again: bool = False) -> None:
        """This instance's execution is over: its resources go to the next. `again`: it has
        more to run, so it competes at once (else the waiting ones would always win)."""
        instance = self._instances.get(id(executor))
        if instance is None or not instance.granted:
            return
        instance.executions += 1
        self._give_back(instance)
        if again:
            instance.waiting_since_ns = time.monotonic_ns()
        self._schedule()

    def _give_back(self, instance: _Instance) -> None:
        instance.granted = False
        for key, count in instance.needs.resources.items():
            self._in_use[key] -= count

    def _recount(self) -> None:
        self._counts = resource_counts((i.needs for i in self._instances.values()), self.explicit)

    def _schedule(self, asking: _Instance | None = None) -> None:
        waiting = {
            ident: instance
            for ident, instance in self._instances.items()
            if instance.waiting_since_ns is not None
        }
        if not waiting:
            return
        free = {key: count - self._in_use.get(key, 0) for key, count in self._counts.items()}
        contenders = [
            Contender(ident, i.needs, i.executions, i.waiting_since_ns or 0)
            for ident, i in waiting.items()
        ]
        now_ns = time.monotonic_ns()
        for ident in grants(contenders, free):
            instance = waiting[ident]
            for key, count in instance.needs.resources.items():
                self._in_use[key] = self._in_use.get(key, 0) + count
            instance.wait.count += 1
            instance.wait.total_ns += now_ns - (instance.waiting_since_ns or now_ns)
            instance.granted, instance.waiting_since_ns = True, None
            if instance is not asking and instance.wake is not None:
                instance.wake()


class ExecutionGate(Protocol):
    """What a batcher asks before an idle instance runs a batch (`RateLimiter` is one)."""

    def acquire(self, executor: object, wake: Callable[[], None]) -> bool: ...

    def withdraw(self, executor: object) -> None: ...

    def release(self, executor: object, again: bool = False) -> None: ...
