"""`EnsembleScheduler`: runs an ensemble's steps for one request, each step as soon as its inputs
are ready, through the composing models' own schedulers (so ensemble traffic batches per step);
through a stream, a step's streamed responses each run the steps after it (`_streaming`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy.typing as npt

from batching import (
    NO_PARAMETERS,
    BatcherClosedError,
    ExecutionRecord,
    InFlight,
    Parameters,
    RequestResult,
    SequenceStep,
)
from server.contract.errors import ModelNotFoundError, ModelNotReadyError
from server.contract.requests import InferOptions, SequenceFlags
from server.core.serving.ensemble._plan import EnsemblePlan, Step
from server.core.serving.ensemble._slots import StepSlots, step_producers
from server.core.serving.ensemble._streaming import StreamedRequest
from server.core.serving.servable import Servable, Streamed
from server.core.serving.submit import count_failure, infer_on


@dataclass(frozen=True, slots=True)
class StepRun:
    """One step of one ensemble request, for its trace (monotonic nanoseconds)."""

    model: str
    version: int
    start_ns: int  # handed to the composing model
    end_ns: int  # its answer was back
    result: RequestResult


class EnsembleResult(RequestResult, frozen=True):
    """An ensemble request's result, with its steps in the order they finished."""

    steps: tuple[StepRun, ...] = ()


Resolve = Callable[[str, str], Servable]  # (model, version "" = newest) -> ready version
Observer = Callable[[ExecutionRecord], None]


class EnsembleScheduler:
    """Serves one ensemble version; holds no tensors between requests."""

    def __init__(self, plan: EnsemblePlan, resolve: Resolve, observer: Observer) -> None:
        self._plan = plan
        self._resolve = resolve  # looked up per request: a reloaded composing model is used
        self._observer = observer
        self._closed = False
        self._in_flight = InFlight()
        self._producers = step_producers(plan)

    async def start(self) -> None:
        bound = self._plan.max_inflight  # 0: no limit
        self._gates: tuple[asyncio.Semaphore, ...] = (
            tuple(asyncio.Semaphore(bound) for _ in self._plan.steps) if bound else ()
        )

    @property
    def plan(self) -> EnsemblePlan:
        return self._plan

    @property
    def in_flight(self) -> int:
        return self._in_flight.count

    @property
    def queue_depth(self) -> int:
        return 0  # requests wait in the composing models' queues, and are counted there

    @property
    def waits_for_batch_mates(self) -> bool:
        return False  # its steps' batchers do, each on its own

    @property
    def waits_out_delay(self) -> bool:
        return False  # its steps' batchers do, each on its own

    async def infer(
        self,
        inputs: dict[str, npt.NDArray[Any]],
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
        # The ensemble's outputs come back to the host whatever `device_outputs` says; its
        # sequence parameters go to every step, as Triton passes a correlation id on. Its
        # deadline (the caller's, or its timeout from now) holds for every step. `in_turn` is
        # not passed on: a step answers the ensemble, not a front end.
        self._check_open()
        with self._in_flight.counted():
            flags = (
                None
                if sequence is None
                else SequenceFlags(sequence.correlation_id, sequence.start, sequence.end)
            )
            options = InferOptions(
                priority,
                timeout_ns // 1000,
                parameters,
                sequence=flags,
                deadline_ns=_deadline_ns(deadline_ns, timeout_ns),
                share=share,
            )
            return await self._run(inputs, batch_size, options)

    async def stream(
        self,
        inputs: dict[str, npt.NDArray[Any]],
        batch_size: int,
        options: InferOptions,
        ended: Callable[[int], None] | None = None,
    ) -> AsyncGenerator[Streamed, None]:
        """One request through a stream: each response its steps' streamed responses make
        (`StreamedRequest`), then a final flag. Its timeout, as `infer`'s, holds for every
        step; its outputs come back to the host. `ended` gets its steps' compute time (the sum
        of their runs, ns) once the last response is out."""
        self._check_open()
        deadline_ns = _deadline_ns(options.deadline_ns, options.timeout_us * 1000)
        options = msgspec.structs.replace(options, deadline_ns=deadline_ns, device_outputs=False)
        with self._in_flight.counted():
            request = StreamedRequest(self._plan, self._resolve, inputs, options, self._gates)
            async with contextlib.aclosing(request.responses()) as responses:
                async for response in responses:
                    yield response
            compute_ns = sum(step.end_ns - step.start_ns for step in request.steps)
            record = ExecutionRecord(max(batch_size, 1), 1, 0, compute_ns, 0, succeeded=True)
            self._observer(record)
            if ended is not None:
                ended(compute_ns)

    def _check_open(self) -> None:
        if self._closed:
            raise BatcherClosedError(
                f"ensemble '{self._plan.name}' is no longer accepting requests"
            )

    async def stop(self, timeout_s: float) -> None:
        self._closed = True
        await self._in_flight.wait_idle(timeout_s)

    async def _run(
        self, inputs: dict[str, npt.NDArray[Any]], batch_size: int, options: InferOptions
    ) -> RequestResult:
        tensors: dict[str, npt.NDArray[Any]] = dict(inputs)
        # Optional inputs the request left out: the steps they feed run without them.
        absent = self._plan.optional - tensors.keys()
        steps = self._plan.steps
        waiting = list(range(len(steps)))
        running: dict[asyncio.Task[StepRun], int] = {}
        runs: list[StepRun] = []
        slots = StepSlots(self._gates, self._producers) if self._gates else None
        finished: list[int] = []
        try:
            while waiting or running:
                ready = [
                    i
                    for i in waiting
                    if all(t in tensors or t in absent for t in steps[i].inputs.values())
                ]
                for i in ready:
                    waiting.remove(i)
                    task = asyncio.create_task(self._step(i, tensors, options, slots))
                    running[task] = i
                if slots is not None:  # the tasks just made have not taken their slots yet
                    for i in finished:
                        slots.finished(i, ready)
                if not running:  # the plan was checked at load: every tensor has a producer
                    raise RuntimeError(f"ensemble '{self._plan.name}': no step can start")
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                finished = []
                for task in done:
                    i = running.pop(task)
                    run = task.result()  # a failed step fails the request
                    runs.append(run)
                    finished.append(i)
                    for output, tensor in steps[i].outputs.items():
                        tensors[tensor] = run.result.outputs[output]
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            if slots is not None:
                slots.release_all()
        results = [run.result for run in runs]
        outcome = EnsembleResult(
            outputs={name: tensors[name] for name in self._plan.outputs},
            queue_ns=sum(r.queue_ns for r in results),
            compute_input_ns=sum(r.compute_input_ns for r in results),
            compute_infer_ns=sum(r.compute_infer_ns for r in results),
            compute_output_ns=sum(r.compute_output_ns for r in results),
            batch_size=max(batch_size, 1),
            instance=",".join(r.instance for r in results),
            steps=tuple(runs),
        )
        self._observer(
            ExecutionRecord(
                outcome.batch_size,
                1,
                outcome.compute_input_ns,
                outcome.compute_infer_ns,
                outcome.compute_output_ns,
                succeeded=True,
            )
        )
        return outcome

    async def _step(
        self,
        index: int,
        tensors: dict[str, npt.NDArray[Any]],
        options: InferOptions,
        slots: StepSlots | None,
    ) -> StepRun:
        step = self._plan.steps[index]
        if slots is not None:
            await slots.take(index)
        start_ns = time.monotonic_ns()
        target = self._resolve(step.model, step.version)
        arrays = {name: tensors[t] for name, t in step.inputs.items() if t in tensors}
        if self._hands_over_on_device(step):
            options = msgspec.structs.replace(options, device_outputs=True)
        result = await infer_on(target, arrays, list(step.outputs), options)
        return StepRun(target.name, target.version, start_ns, time.monotonic_ns(), result)

    def _hands_over_on_device(self, step: Step) -> bool:
        """Whether the step's outputs may stay on the device: none leaves the ensemble and
        every step reading them computes on a device (looked up now: a reload may move one)."""
        if not step.consumers:
            return False
        try:
            return all(self._resolve(model, version).on_device for model, version in step.consumers)
        except (ModelNotFoundError, ModelNotReadyError):  # its step fails when it starts
            return False


def _deadline_ns(deadline_ns: int, timeout_ns: int) -> int:
    """A request's deadline for its steps: the caller's, or its timeout from now if sooner
    (0: neither)."""
    if timeout_ns <= 0:
        return deadline_ns
    due_ns = time.monotonic_ns() + timeout_ns
    return min(deadline_ns, due_ns) if deadline_ns else due_ns


class EnsembleStreams:
    """The stream router of an ensemble with a step that streams its responses: a request
    through a stream gets each response that step's responses make (`EnsembleScheduler.stream`);
    a request answered once still takes one."""

    def __init__(self, scheduler: EnsembleScheduler) -> None:
        self._scheduler = scheduler

    async def stream(
        self,
        target: Servable,
        arrays: dict[str, npt.NDArray[Any]],
        batch_size: int,
        options: InferOptions,
    ) -> AsyncGenerator[Streamed, None]:
        """The request's responses, counted in the ensemble's statistics once it ends."""
        start_ns = time.monotonic_ns()
        computed: list[int] = []
        try:
            async with contextlib.aclosing(
                self._scheduler.stream(arrays, batch_size, options, computed.append)
            ) as responses:
                async for response in responses:
                    yield response
        except (Exception, asyncio.CancelledError, GeneratorExit) as exc:
            count_failure(target.stats, exc, options, start_ns)
            raise
        answered = RequestResult({}, 0, 0, sum(computed), 0, max(batch_size, 1), "")
        target.stats.record_success(answered, time.monotonic_ns() - start_ns)
