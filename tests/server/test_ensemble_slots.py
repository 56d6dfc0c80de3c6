"""`max_inflight_requests`: a request holds a step's slot from before its call until the steps its
answer made ready have theirs; the slots are shared by every request; a diamond never deadlocks."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from server.core.serving.ensemble import EnsemblePlan, Step, StepSlots, step_producers


def _plan(*steps: tuple[str, str]) -> EnsemblePlan:
    """Steps named by their output tensor, each reading the tensors listed in the first."""
    made = tuple(
        Step(out, "", {f"in{i}": t for i, t in enumerate(ins.split())}, {"y": out})
        for ins, out in steps
    )
    return EnsemblePlan("ens", ("X",), frozenset(), (made[-1].outputs["y"],), made, 1)


PIPELINE = _plan(("X", "a"), ("a", "b"))  # a -> b
DIAMOND = _plan(("X", "s"), ("s", "y"), ("s", "v"), ("y v", "t"))  # s -> y, v -> t


def _gates(plan: EnsemblePlan) -> tuple[asyncio.Semaphore, ...]:
    return tuple(asyncio.Semaphore(1) for _ in plan.steps)


async def _taken(slots: StepSlots, step: int) -> bool:
    """Whether the step's slot can be taken now."""
    waiter = asyncio.ensure_future(slots.take(step))
    for _ in range(3):
        await asyncio.sleep(0)
    if waiter.done():
        return True
    waiter.cancel()
    return False


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coroutine)


def test_each_step_knows_the_steps_it_reads_from() -> None:
    assert step_producers(PIPELINE) == (frozenset(), frozenset({0}))
    assert step_producers(DIAMOND) == (
        frozenset(),
        frozenset({0}),
        frozenset({0}),
        frozenset({1, 2}),
    )


def test_a_finished_step_holds_its_slot_until_the_next_step_has_one() -> None:
    async def scenario() -> None:
        gates = _gates(PIPELINE)
        first = StepSlots(gates, step_producers(PIPELINE))
        second = StepSlots(gates, step_producers(PIPELINE))
        assert await _taken(first, 0)
        first.finished(0, [1])
        assert not await _taken(second, 0)  # the first request's tensor waits for step 1
        assert await _taken(first, 1)  # handed over: step 0 is free again
        assert await _taken(second, 0)
        second.finished(0, [1])
        assert not await _taken(second, 1)  # step 1 is busy with the first request
        first.finished(1, [])  # the last step gives its slot back when it answers
        assert await _taken(second, 1)
        second.release_all()
        assert not any(gate.locked() for gate in gates)

    _run(scenario())


def test_a_step_waiting_for_another_input_does_not_hold_its_producer() -> None:
    async def scenario() -> None:
        gates = _gates(DIAMOND)
        producers = step_producers(DIAMOND)
        one, two = StepSlots(gates, producers), StepSlots(gates, producers)
        for slots in (one, two):  # each request has run s and handed it to y and v
            assert await _taken(slots, 0)
            slots.finished(0, [1, 2])
            if slots is one:
                assert await _taken(one, 1) and await _taken(one, 2)
        # The first request's y answered, but t still waits for its v: y is free for others.
        one.finished(1, [])
        assert await _taken(two, 1)
        two.finished(1, [])
        one.finished(2, [3])
        assert await _taken(one, 3)
        assert await _taken(two, 2)
        two.finished(2, [3])
        assert not await _taken(two, 3)
        one.release_all()
        assert await _taken(two, 3)
        two.release_all()
        assert not any(gate.locked() for gate in gates)

    _run(scenario())


def test_release_all_gives_back_a_failed_request_s_slots() -> None:
    async def scenario() -> None:
        gates = _gates(PIPELINE)
        slots = StepSlots(gates, step_producers(PIPELINE))
        assert await _taken(slots, 0)
        slots.finished(0, [1])
        slots.release_all()
        assert not any(gate.locked() for gate in gates)

    _run(scenario())
