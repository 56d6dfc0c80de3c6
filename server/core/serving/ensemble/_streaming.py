"""An ensemble request whose steps stream their responses (a decoupled model, or an ensemble with
such a step), served through a stream: each response of such a step carries the rest of the
pipeline on its own, as Triton's ensemble scheduler fans them out, and each time the ensemble's
outputs are complete along one line of responses, the client gets them as one response.

A line of responses is a `_Branch`: the tensors a streamed response added to the branch it came
from. A step runs once, in the first branch that sees all its inputs, so a step that does not
depend on a streamed response (a preprocessing step, a step beside the stream) runs once for the
request and every branch reads its outputs; a step after the stream runs once per response. A
branch answers when every ensemble output is there and one of them is its own (the root branch:
when it holds them all). Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from server.contract.requests import InferOptions
from server.core.serving.ensemble._plan import EnsemblePlan
from server.core.serving.servable import Servable, Streamed
from server.core.serving.submit import infer_on, stream_on

Array = npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class StepTimes:
    """One step's run in a streamed request, for its statistics (monotonic nanoseconds)."""

    model: str
    version: int
    start_ns: int
    end_ns: int


@dataclass(eq=False, slots=True)
class _Branch:
    """The tensors of one line of responses: its parent's, and those written here."""

    parent: _Branch | None
    tensors: dict[str, Array] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)  # steps started in this branch
    children: list[_Branch] = field(default_factory=list)
    answered: bool = False

    def get(self, name: str) -> Array | None:
        branch: _Branch | None = self
        while branch is not None:
            if name in branch.tensors:
                return branch.tensors[name]
            branch = branch.parent
        return None

    def ran(self, step: int) -> bool:
        """Whether the step started here or in a branch this one came from."""
        branch: _Branch | None = self
        while branch is not None:
            if step in branch.started:
                return True
            branch = branch.parent
        return False

    def lineage(self) -> Iterator[_Branch]:
        """This branch and every branch that came from it."""
        yield self
        for child in self.children:
            yield from child.lineage()


@dataclass(frozen=True, slots=True)
class _Event:
    """What a step's task reports to the request: a response of a streamed step (`outputs`
    alone: a new branch), its end (`times`; with the outputs of a step that answers once, which
    are its branch's own), or the `error` that fails the request."""

    step: int
    branch: _Branch
    outputs: Mapping[str, Array] | None = None
    times: StepTimes | None = None
    error: BaseException | None = None


class StreamedRequest:
    """One ensemble request served through a stream (see the module's docs); `responses()` yields
    each response, then a final flag alone."""

    def __init__(
        self,
        plan: EnsemblePlan,
        resolve: Callable[[str, str], Servable],
        inputs: Mapping[str, Array],
        options: InferOptions,
        gates: tuple[asyncio.Semaphore, ...],
    ) -> None:
        self._plan = plan
        self._resolve = resolve
        self._options = options
        self._gates = gates  # max_inflight_requests: one per step (empty: unbounded)
        self._absent = plan.optional - inputs.keys()
        self._root = _Branch(None, dict(inputs))
        self._events: asyncio.Queue[_Event] = asyncio.Queue()
        self._running: set[asyncio.Task[None]] = set()
        self._pending = 0  # steps started whose end has not been taken yet
        self.steps: list[StepTimes] = []  # each step's run, as they end

    async def responses(self) -> AsyncGenerator[Streamed, None]:
        try:
            answers = self._start(self._root)
            while True:
                for outputs in answers:
                    yield Streamed(outputs, None, False)
                if not self._pending:
                    break
                answers = self._take(await self._events.get())
            yield Streamed(None, None, True)
        finally:
            for task in self._running:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)

    def _take(self, event: _Event) -> list[dict[str, Array]]:
        """Apply one event; the responses it completed."""
        if event.error is not None:
            raise event.error
        step = self._plan.steps[event.step]
        if event.times is not None:  # the step's end
            self._pending -= 1
            self.steps.append(event.times)
        if event.outputs is None:
            return []
        outputs = event.outputs.items()
        written = {step.outputs[name]: array for name, array in outputs if name in step.outputs}
        if event.times is not None:  # a step answered once: its outputs are its branch's own
            event.branch.tensors.update(written)
            return self._start(event.branch)
        child = _Branch(event.branch, written)  # a streamed response: a line of its own
        event.branch.children.append(child)
        return self._start(child)

    def _start(self, branch: _Branch) -> list[dict[str, Array]]:
        """Start every step that can now run in `branch` or the branches that came from it;
        the responses now complete there."""
        answers = []
        for each in branch.lineage():
            for index, step in enumerate(self._plan.steps):
                if each.ran(index):
                    continue
                if all(each.get(t) is not None or t in self._absent for t in step.inputs.values()):
                    each.started.add(index)
                    self._pending += 1
                    task = asyncio.ensure_future(self._run_step(index, each))
                    self._running.add(task)
                    task.add_done_callback(self._running.discard)
            outputs = self._answer(each)
            if outputs is not None:
                answers.append(outputs)
        return answers

    def _answer(self, branch: _Branch) -> dict[str, Array] | None:
        if branch.answered:
            return None
        own = branch.parent is None or any(name in branch.tensors for name in self._plan.outputs)
        outputs = {name: branch.get(name) for name in self._plan.outputs}
        if not own or any(array is None for array in outputs.values()):
            return None
        branch.answered = True
        return {name: array for name, array in outputs.items() if array is not None}

    async def _run_step(self, index: int, branch: _Branch) -> None:
        step = self._plan.steps[index]
        gate = self._gates[index] if self._gates else None
        try:
            if gate is not None:
                await gate.acquire()
            try:
                start_ns = time.monotonic_ns()
                target = self._resolve(step.model, step.version)
                arrays = {name: branch.get(t) for name, t in step.inputs.items()}
                given = {name: array for name, array in arrays.items() if array is not None}
                outputs = list(step.outputs)
                if target.router is None:
                    result = await infer_on(target, given, outputs, self._options)
                    times = StepTimes(target.name, target.version, start_ns, time.monotonic_ns())
                    self._events.put_nowait(_Event(index, branch, result.outputs, times))
                    return
                async with contextlib.aclosing(
                    stream_on(target, given, outputs, self._options)
                ) as items:
                    async for item in items:
                        if item.error is not None:
                            raise item.error
                        if item.outputs is not None:
                            self._events.put_nowait(_Event(index, branch, item.outputs))
                times = StepTimes(target.name, target.version, start_ns, time.monotonic_ns())
                self._events.put_nowait(_Event(index, branch, times=times))
            finally:
                if gate is not None:
                    gate.release()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the request fails with it
            self._events.put_nowait(_Event(index, branch, error=exc))
