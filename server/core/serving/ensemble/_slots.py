"""`max_inflight_requests` (Triton 26.04): one limit per step, shared by every request of the
ensemble. A request takes a step's slot before handing the step its inputs, and keeps it after the
step answered until each step its outputs made ready has taken a slot of its own, so a fast step
stalls behind a slow one instead of piling up tensors for it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from server.core.serving.ensemble._plan import EnsemblePlan


def step_producers(plan: EnsemblePlan) -> tuple[frozenset[int], ...]:
    """For each step (by its index in the plan), the steps whose outputs it reads."""
    made_by = {
        tensor: index for index, step in enumerate(plan.steps) for tensor in step.outputs.values()
    }
    return tuple(
        frozenset(made_by[t] for t in step.inputs.values() if t in made_by) for step in plan.steps
    )


class StepSlots:
    """The slots one ensemble request holds; every one is given back by `release_all` at the
    latest. A step that finished keeps its slot only while a step it made ready waits for one:
    a step still waiting for another input does not hold its producers back, so no two requests
    can each hold what the other waits for (every wait points to a step further down)."""

    def __init__(
        self, gates: Sequence[asyncio.Semaphore], producers: Sequence[frozenset[int]]
    ) -> None:
        self._gates = gates
        self._producers = producers
        # step -> the steps it made ready that have no slot yet (None: it is still running)
        self._held: dict[int, set[int] | None] = {}

    async def take(self, step: int) -> None:
        """Wait for the step's slot; then the steps that fed it need no longer hold theirs."""
        await self._gates[step].acquire()
        self._held[step] = None
        for producer in self._producers[step]:
            waiting = self._held.get(producer)
            if waiting is not None and step in waiting:
                waiting.discard(step)
                if not waiting:
                    self._release(producer)

    def finished(self, step: int, started: Iterable[int]) -> None:
        """The step answered; `started` are the steps its answer made ready (they were just
        started and have not taken their slots yet)."""
        if step not in self._held:
            return  # cancelled before it had a slot
        waiting = {s for s in started if step in self._producers[s]}
        if waiting:
            self._held[step] = waiting
        else:
            self._release(step)

    def release_all(self) -> None:
        for step in list(self._held):
            self._release(step)

    def _release(self, step: int) -> None:
        del self._held[step]
        self._gates[step].release()
