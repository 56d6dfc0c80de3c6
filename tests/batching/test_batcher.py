"""The batcher with real executors: one request per execution, first free instance, failures."""

import asyncio
from dataclasses import dataclass

import numpy as np
import pytest

from batching import Batcher, BatcherClosedError, ExecutionRecord, TensorMap


@dataclass(frozen=True)
class Result:
    outputs: dict[str, np.ndarray]
    compute_input_ns: int = 1
    compute_infer_ns: int = 2
    compute_output_ns: int = 3


class Doubler:
    """Doubles "x" after a delay, recording when each execution ran and how many overlapped."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.running = 0
        self.most_at_once = 0
        self.calls: list[TensorMap] = []

    async def execute(self, inputs: TensorMap) -> Result:
        self.calls.append(inputs)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(self.delay_s)
            if float(inputs["x"].ravel()[0]) < 0:
                raise RuntimeError("negative input")
            return Result({"y": inputs["x"] * 2})
        finally:
            self.running -= 1


def _x(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 2), value, np.float32)}


async def test_each_request_gets_its_own_answer_one_per_execution() -> None:
    executor = Doubler()
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [executor], records.append)
    await batcher.start()
    results = await asyncio.gather(*(batcher.infer(_x(i), 1) for i in range(10)))
    assert [float(r.outputs["y"][0, 0]) for r in results] == [2.0 * i for i in range(10)]
    assert len(executor.calls) == 10
    assert [r.batch_size for r in records] == [1] * 10
    assert all(r.compute_infer_ns == 2 for r in results)
    await batcher.stop(1.0)


async def test_instances_run_side_by_side() -> None:
    first, second = Doubler(0.05), Doubler(0.05)
    batcher = Batcher("m", [first, second])
    await batcher.start()
    await asyncio.gather(*(batcher.infer(_x(1), 1) for _ in range(6)))
    assert len(first.calls) == 3 and len(second.calls) == 3
    assert first.most_at_once == 1 and second.most_at_once == 1
    await batcher.stop(1.0)


async def test_a_failing_execution_fails_only_its_request() -> None:
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [Doubler()], records.append)
    await batcher.start()
    results = await asyncio.gather(
        batcher.infer(_x(1), 1),
        batcher.infer(_x(-1), 1),
        batcher.infer(_x(3), 1),
        return_exceptions=True,
    )
    assert isinstance(results[1], RuntimeError)
    assert [float(r.outputs["y"][0, 0]) for r in (results[0], results[2])] == [2.0, 6.0]
    assert [r.succeeded for r in records] == [True, False, True]
    await batcher.stop(1.0)


async def test_a_cancelled_request_is_never_executed() -> None:
    executor = Doubler(0.05)
    batcher = Batcher("m", [executor])
    await batcher.start()
    running = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)
    waiting = asyncio.create_task(batcher.infer(_x(5), 1))
    await asyncio.sleep(0.01)
    waiting.cancel()
    assert float((await running).outputs["y"][0, 0]) == 2.0
    await asyncio.sleep(0.02)
    assert len(executor.calls) == 1
    await batcher.stop(1.0)


async def test_stop_lets_accepted_requests_finish_and_refuses_new_ones() -> None:
    batcher = Batcher("m", [Doubler(0.05)])
    await batcher.start()
    accepted = [asyncio.create_task(batcher.infer(_x(i), 1)) for i in range(3)]
    await asyncio.sleep(0)
    stopping = asyncio.create_task(batcher.stop(5.0))
    await asyncio.sleep(0)
    with pytest.raises(BatcherClosedError):
        await batcher.infer(_x(1), 1)
    results = await asyncio.gather(*accepted)
    assert [float(r.outputs["y"][0, 0]) for r in results] == [0.0, 2.0, 4.0]
    await stopping
