"""Measuring in process: the model loaded by the server's own `Repository` (loader, instances,
dynamic batcher) and each request handed to `submit`, as the engine does for a client's, with
no network in between: what is measured is the server's scheduling and the model."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.contract.requests import InferOptions
from server.core.repository import ModelVersion, Repository
from server.core.serving import submit
from server.tools._measured import MeasuredExecution
from server.tools.profile._gpu import GpuMeter
from server.tools.profile._loop import Window, closed_loop
from server.tools.profile._points import Point, percentile_ms
from server.tools.profile._space import Variant

IN_PROCESS = "in process"
_OPTIONS = InferOptions()


@dataclass(frozen=True, slots=True)
class _Counters:
    """A version's execution counters at one instant."""

    executions: int
    inferences: int
    batches: dict[int, tuple[int, int]]  # batch size -> (executions, total compute ns)
    cpu_s: float  # this process's CPU time

    @classmethod
    def of(cls, version: ModelVersion) -> _Counters:
        stats = version.stats
        batches = {
            size: (
                durations.compute_infer.count,
                durations.compute_input.total_ns
                + durations.compute_infer.total_ns
                + durations.compute_output.total_ns,
            )
            for size, durations in stats.batches.items()
        }
        return cls(stats.execution_count, stats.inference_count, batches, time.process_time())


async def load(repository: Repository, name: str, config: mc.ModelConfig) -> ModelVersion:
    """Load (or reload) `name` with `config` in place of its config.pbtxt; its newest version."""
    await repository.load(name, override=config)
    return repository.get(name)


async def measure_local(
    version: ModelVersion,
    variant: Variant,
    inputs: Mapping[str, npt.NDArray[Any]],
    concurrency: int,
    window: Window,
    advance: Callable[[float], None],
) -> Point:
    """One point: `concurrency` requests of batch 1 in flight through the version's batcher."""
    edges: list[_Counters] = []
    gpu = GpuMeter([i.device for i in version.instances if i.device.is_cuda])

    async def call() -> object:
        return await submit(version, dict(inputs), 1, _OPTIONS)

    async def on_edge(opening: bool) -> None:
        edges.append(_Counters.of(version))
        if opening:
            gpu.start()
        else:
            gpu.stop()

    done = await closed_loop(call, concurrency, window, on_edge, advance)
    first, last = edges
    executions = last.executions - first.executions
    return Point(
        variant=variant,
        concurrency=concurrency,
        where=IN_PROCESS,
        infer_per_s=len(done.latencies_ns) / done.window_s,
        p50_ms=percentile_ms(done.latencies_ns, 50),
        p95_ms=percentile_ms(done.latencies_ns, 95),
        p99_ms=percentile_ms(done.latencies_ns, 99),
        average_batch=(last.inferences - first.inferences) / executions if executions else 0.0,
        cpu_percent=100 * (last.cpu_s - first.cpu_s) / done.window_s,
        gpu_percent=gpu.percent(),
        execution=_typical_execution(first, last),
    )


def _typical_execution(first: _Counters, last: _Counters) -> MeasuredExecution | None:
    """The mean compute time of the batch size the window executed most often."""
    deltas = {
        size: (
            count - first.batches.get(size, (0, 0))[0],
            total - first.batches.get(size, (0, 0))[1],
        )
        for size, (count, total) in last.batches.items()
    }
    ran = {size: delta for size, delta in deltas.items() if delta[0] > 0}
    if not ran:
        return None
    size = max(ran, key=lambda s: (ran[s][0], s))
    count, total_ns = ran[size]
    return MeasuredExecution(size, total_ns / count / 1e6)
