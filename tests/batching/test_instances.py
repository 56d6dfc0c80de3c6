"""A batcher's instance pool: idle instances taken in order, a gate's grants, and retirement
waiting for a busy instance to come back."""

import asyncio
from collections.abc import Callable, Sequence

import pytest

from batching import Parameters, TensorMap
from batching.instances import InstancePool


class Named:
    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> object:
        raise AssertionError("a pool never runs its instances")


class OnlyGate:
    """Grants only the instance named `allowed`; records releases and withdrawals."""

    def __init__(self, allowed: str) -> None:
        self.allowed = allowed
        self.released: list[tuple[str, bool]] = []
        self.withdrawn: list[str] = []

    def acquire(self, executor: object, wake: Callable[[], None]) -> bool:
        return getattr(executor, "name", None) == self.allowed

    def withdraw(self, executor: object) -> None:
        self.withdrawn.append(getattr(executor, "name", ""))

    def release(self, executor: object, again: bool = False) -> None:
        self.released.append((getattr(executor, "name", ""), again))


def test_a_pool_needs_an_instance() -> None:
    with pytest.raises(ValueError, match="needs at least one executor"):
        InstancePool("m", [], None)


def test_without_a_gate_the_first_idle_instance_runs_and_returns_last() -> None:
    a, b = Named("a"), Named("b")
    pool = InstancePool("m", [a, b], None)
    pool.start()
    assert pool.take(lambda: None) is a
    assert pool.give_back(a, again=False)
    assert pool.take(lambda: None) is b and pool.take(lambda: None) is a
    assert not pool.any_idle and pool.count == 2


def test_a_gate_picks_the_instance_it_grants_and_hears_of_its_return() -> None:
    a, b = Named("a"), Named("b")
    gate = OnlyGate("b")
    pool = InstancePool("m", [a, b], gate)
    pool.start()
    assert pool.take(lambda: None) is b
    assert pool.take(lambda: None) is None  # a waits for its grant
    pool.withdraw()
    assert gate.withdrawn == ["a"]
    assert pool.give_back(b, again=True) and gate.released == [("b", True)]


async def test_retiring_a_busy_instance_waits_for_it_to_come_back() -> None:
    a, b = Named("a"), Named("b")
    pool = InstancePool("m", [a, b], None)
    pool.start()
    busy = [pool.take(lambda: None), pool.take(lambda: None)]
    retired = asyncio.create_task(pool.retire())
    await asyncio.sleep(0)
    assert not retired.done()
    assert not pool.give_back(a, again=False)  # taken by the retirement, not idle again
    assert await retired is a and pool.count == 1 and busy[1] is b
    with pytest.raises(ValueError, match="keeps at least one executor"):
        await pool.retire()
