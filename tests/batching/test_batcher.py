"""The batcher with real executors: one request per execution, first free instance, failures."""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pytest

from batching import (
    Batcher,
    BatcherClosedError,
    BatcherFaultError,
    BatchPolicy,
    DeadlineCancelledError,
    DeadlineExceededError,
    ExecutionRecord,
    ExecutorContractError,
    Parameters,
    TensorMap,
)
from batching.reach import LEAVE_AFTER
from server.core.repository import parse_config
from tests.batching.faults import FaultyGate

# No dynamic_batching: one request per execution, as Triton's default scheduler.
ONE_BY_ONE = BatchPolicy.from_config(parse_config('name: "m" max_batch_size: 8', "inline"))


@dataclass(frozen=True)
class Result:
    responses: list[dict[str, np.ndarray] | Exception]
    compute_input_ns: int = 1
    compute_infer_ns: int = 2
    compute_output_ns: int = 3
    rescheduled: frozenset[int] = frozenset()


class Doubler:
    """Doubles "x" after a delay, recording when each execution ran and how many overlapped."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.name = "doubler"
        self.delay_s = delay_s
        self.running = 0
        self.most_at_once = 0
        self.calls: list[Sequence[TensorMap]] = []
        self.device_outputs: list[bool] = []  # per execution, as the batcher asked
        self.tasks: list[asyncio.Task[object] | None] = []  # the task each execution ran in
        self.hold: asyncio.Event | None = None  # set: each execution waits for it first

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        self.calls.append(requests)
        self.device_outputs.append(device_outputs)
        self.tasks.append(asyncio.current_task())
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.hold is not None:
                await self.hold.wait()
            await asyncio.sleep(self.delay_s)
            if float(requests[0]["x"].ravel()[0]) < 0:
                raise RuntimeError("negative input")
            # A NaN fails only its own request, as a backend's per-request error does.
            return Result(
                [
                    ValueError("NaN input") if np.isnan(r["x"]).any() else {"y": r["x"] * 2}
                    for r in requests
                ]
            )
        finally:
            self.running -= 1


def _x(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 2), value, np.float32)}


async def test_each_request_gets_its_own_answer_one_per_execution() -> None:
    executor = Doubler()
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [executor], ONE_BY_ONE, records.append)
    await batcher.start()
    results = await asyncio.gather(*(batcher.infer(_x(i), 1) for i in range(10)))
    assert [float(r.outputs["y"][0, 0]) for r in results] == [2.0 * i for i in range(10)]
    assert len(executor.calls) == 10
    assert [r.batch_size for r in records] == [1] * 10
    assert all(r.compute_infer_ns == 2 for r in results)
    await batcher.stop(1.0)


async def test_instances_run_side_by_side() -> None:
    first, second = Doubler(0.05), Doubler(0.05)
    batcher = Batcher("m", [first, second], ONE_BY_ONE)
    await batcher.start()
    await asyncio.gather(*(batcher.infer(_x(1), 1) for _ in range(6)))
    assert len(first.calls) == 3 and len(second.calls) == 3
    assert first.most_at_once == 1 and second.most_at_once == 1
    await batcher.stop(1.0)


async def test_a_failing_execution_fails_only_its_request() -> None:
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [Doubler()], ONE_BY_ONE, records.append)
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
    batcher = Batcher("m", [executor], ONE_BY_ONE)
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
    batcher = Batcher("m", [Doubler(0.05)], ONE_BY_ONE)
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


async def test_a_per_request_error_fails_only_that_request_of_the_batch() -> None:
    batcher = Batcher("m", [Doubler(0.02)], dynamic("max_queue_delay_microseconds: 20000"))
    await batcher.start()
    values = [1.0, float("nan"), 3.0]
    results = await asyncio.gather(
        *(batcher.infer(_x(v), 1) for v in values), return_exceptions=True
    )
    assert isinstance(results[1], ValueError)
    assert [float(r.outputs["y"][0, 0]) for r in (results[0], results[2])] == [2.0, 6.0]
    assert results[0].batch_size == 3  # they did run as one batch
    await batcher.stop(1.0)


async def test_a_batch_gets_device_outputs_only_when_all_its_requests_want_them() -> None:
    executor = Doubler(0.02)
    batcher = Batcher("m", [executor], dynamic("max_queue_delay_microseconds: 20000"))
    await batcher.start()
    for wanted in ([True, True], [True, False], [False, False]):
        await asyncio.gather(*(batcher.infer(_x(1.0), 1, device_outputs=w) for w in wanted))
    assert [len(call) for call in executor.calls] == [2, 2, 2]  # each pair ran as one batch
    assert executor.device_outputs == [True, False, False]
    await batcher.stop(1.0)


class Forgetful:
    """Answers one request fewer than it was given: a broken executor."""

    name = "forgetful"

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        return Result([{"y": r["x"]} for r in requests[1:]])


async def test_an_executor_that_loses_a_response_fails_the_batch_clearly() -> None:
    batcher = Batcher("m", [Forgetful()], ONE_BY_ONE)
    await batcher.start()
    with pytest.raises(ExecutorContractError, match="answered 0 of the batch's 1 requests"):
        await batcher.infer(_x(1), 1)
    await batcher.stop(1.0)


def dynamic(batching: str) -> BatchPolicy:
    return BatchPolicy.from_config(
        parse_config(f'name: "m" max_batch_size: 8 dynamic_batching {{ {batching} }}', "inline")
    )


async def test_scattered_requests_are_gathered_and_answered_each_its_own() -> None:
    executor = Doubler(0.02)
    records: list[ExecutionRecord] = []
    batcher = Batcher(
        "m", [executor], dynamic("max_queue_delay_microseconds: 5000"), records.append
    )
    await batcher.start()
    sizes = [1, 2, 3, 1, 4, 2, 1, 3] * 4
    requests = [{"x": np.full((n, 2), float(i), np.float32)} for i, n in enumerate(sizes)]
    results = await asyncio.gather(
        *(batcher.infer(r, n) for r, n in zip(requests, sizes, strict=True))
    )
    for i, (result, n) in enumerate(zip(results, sizes, strict=True)):
        np.testing.assert_array_equal(result.outputs["y"], np.full((n, 2), 2.0 * i))
    assert sum(r.batch_size for r in records) == sum(sizes)
    assert len(records) < len(sizes)
    assert max(r.batch_size for r in records) <= 8
    await batcher.stop(1.0)


async def test_rejected_on_timeout_and_delayed_ones_still_served() -> None:
    from batching import RequestTimeoutError

    reject = Batcher(
        "m",
        [Doubler(0.05)],
        dynamic("default_queue_policy { default_timeout_microseconds: 10000 }"),
    )
    await reject.start()
    results = await asyncio.gather(
        *(reject.infer(_x(i), 1) for i in range(1, 4)), return_exceptions=True
    )
    # The first batch takes all three at once (no delay), so none waits past 10 ms.
    assert not any(isinstance(r, Exception) for r in results)
    busy = asyncio.create_task(reject.infer(_x(1), 1))
    await asyncio.sleep(0.005)
    late = await asyncio.gather(reject.infer(_x(2), 1), return_exceptions=True)
    assert isinstance(late[0], RequestTimeoutError)
    assert str(late[0]) == "Request timeout expired"
    await busy
    await reject.stop(1.0)


async def test_preserve_ordering_answers_in_dispatch_order() -> None:
    slow, fast = Doubler(0.08), Doubler(0.0)
    batcher = Batcher("m", [slow, fast], dynamic("preserve_ordering: true"))
    await batcher.start()
    finished: list[int] = []

    async def one(i: int) -> None:
        await batcher.infer(_x(i), 1)
        finished.append(i)

    first = asyncio.create_task(one(1))
    await asyncio.sleep(0.01)  # request 1 is running on the slow instance
    await asyncio.gather(first, one(2))
    assert finished == [1, 2]
    await batcher.stop(1.0)


# A batch waits out a 20 ms delay, up to 32 rows; or is sent at once at a preferred 24.
WAITING = BatchPolicy.from_config(
    parse_config(
        'name: "m" max_batch_size: 32 dynamic_batching { max_queue_delay_microseconds: 20000 }',
        "inline",
    )
)
AT_24 = replace(WAITING, preferred_batch_sizes=(24,))


async def _answer_turns(
    batcher: Batcher, in_turn: list[bool], cancel: int | None = None
) -> list[int]:
    """The loop turn (counted from the batch's end) in which each of one batch's requests got
    its answer; -1 for request `cancel`, cancelled by the first request answered in turn."""
    loop = asyncio.get_running_loop()
    turn = 0

    def tick() -> None:
        nonlocal turn
        turn += 1
        loop.call_soon(tick)

    tasks: list[asyncio.Task[int]] = []

    async def one(i: int) -> int:
        await batcher.infer(_x(i), 1, in_turn=in_turn[i])
        if cancel is not None and in_turn[i] and not tasks[cancel].done():
            tasks[cancel].cancel()
        return turn

    tasks.extend(asyncio.create_task(one(i)) for i in range(len(in_turn)))
    loop.call_soon(tick)
    answered = await asyncio.gather(*tasks, return_exceptions=True)
    first = min(t for t in answered if isinstance(t, int))
    return [t - first if isinstance(t, int) else -1 for t in answered]


async def test_answers_taken_in_turn_go_out_over_turns_of_the_loop() -> None:
    batcher = Batcher("m", [Doubler()], WAITING)
    await batcher.start()
    # 8 answered together, 16 in turn: two a turn over 8 turns, in the batch's order.
    turns = await _answer_turns(batcher, [i % 3 != 0 for i in range(24)])
    together = [t for i, t in enumerate(turns) if i % 3 == 0]
    assert together == [0] * 8
    assert [t for i, t in enumerate(turns) if i % 3 != 0] == [i // 2 for i in range(16)]
    await batcher.stop(1.0)


async def test_a_caller_that_leaves_between_turns_is_skipped() -> None:
    batcher = Batcher("m", [Doubler()], WAITING)
    await batcher.start()
    turns = await _answer_turns(batcher, [True] * 24, cancel=23)
    assert turns[23] == -1
    assert sorted(turns[:23]) == [i // 3 for i in range(24)][:23]
    assert (await batcher.infer(_x(1), 1, in_turn=True)).outputs["y"][0, 0] == 2.0
    await batcher.stop(1.0)


async def test_preserve_ordering_answers_a_batch_at_once() -> None:
    policy = replace(WAITING, preserve_ordering=True)
    batcher = Batcher("m", [Doubler()], policy)
    await batcher.start()
    assert await _answer_turns(batcher, [True] * 24) == [0] * 24
    await batcher.stop(1.0)


async def test_a_batch_sent_at_a_preferred_size_is_answered_at_once() -> None:
    # Its next batch waits for its last request, not its first: turns would delay that one.
    batcher = Batcher("m", [Doubler()], AT_24)
    await batcher.start()
    assert await _answer_turns(batcher, [True] * 24) == [0] * 24
    await batcher.stop(1.0)


# A 50 ms delay with Convoy's adaptive delay on.
ADAPTIVE = BatchPolicy.from_config(
    parse_config(
        'name: "m" max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 50000 } '
        'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "true" } }',
        "inline",
    )
)


async def test_adaptive_delay_learns_that_a_lone_client_gains_nothing_from_waiting() -> None:
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [Doubler()], ADAPTIVE, records.append)
    await batcher.start()
    loop = asyncio.get_running_loop()
    latencies = []
    for i in range(5):  # one request at a time, as a client at concurrency 1
        start = loop.time()
        await batcher.infer(_x(i), 1)
        latencies.append(loop.time() - start)
    assert latencies[0] >= 0.045  # the first wait (a probe) reaches one request
    assert max(latencies[1:]) < 0.02  # then the delay is skipped
    # Many clients at once: waiting pays off again, and batches form.
    await asyncio.gather(*(batcher.infer(_x(i), 1) for i in range(16)))
    assert max(r.batch_size for r in records) > 1
    await batcher.stop(1.0)


async def _clients_in_step(batcher: Batcher, count: int, rounds: int) -> list[list[float]]:
    """`count` clients, 2 ms apart, each sending `rounds` requests, the next a little after its
    answer (its own offset later); each client's latencies."""
    loop = asyncio.get_running_loop()
    latencies: list[list[float]] = [[] for _ in range(count)]

    async def client(think_s: float, mine: list[float]) -> None:
        for i in range(rounds):
            await asyncio.sleep(think_s)
            start = loop.time()
            await batcher.infer(_x(i), 1)
            mine.append(loop.time() - start)

    await asyncio.gather(*(client(0.002 * i, mine) for i, mine in enumerate(latencies)))
    return latencies


async def test_adaptive_delay_sends_clients_in_step_once_all_are_in() -> None:
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [Doubler()], ADAPTIVE, records.append)
    await batcher.start()
    four = await _clients_in_step(batcher, 4, 5)
    # The first batch waits out the delay (a probe) and reaches 4: the next ones go as soon as
    # their fourth request is in, where Triton's batcher would wait 50 ms for each.
    assert four[0][0] >= 0.045
    assert max(max(mine[1:]) for mine in four) < 0.03
    assert [r.batch_size for r in records] == [4] * 5
    # Later, six clients: a probe (the reach is 20 delays old) finds six, and batches of six
    # follow.
    await asyncio.sleep(1.05)
    records.clear()
    six = await _clients_in_step(batcher, 6, 5)
    assert max(max(mine[1:]) for mine in six) < 0.03
    assert [r.batch_size for r in records] == [6] * 5
    await batcher.stop(1.0)


async def test_adaptive_delay_holds_for_the_largest_preferred_size_where_clients_reach_it() -> None:
    policy = BatchPolicy.from_config(
        parse_config(
            'name: "m" max_batch_size: 8 dynamic_batching { preferred_batch_size: [2, 4] '
            "max_queue_delay_microseconds: 50000 }",
            "inline",
        )
    )
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [Doubler()], policy, records.append)
    await batcher.start()
    # Four clients: the first batch (a probe) waits on past the preferred 2 and reaches 4, the
    # largest; the next ones wait for their fourth request too, where Triton's batcher sends 2.
    four = await _clients_in_step(batcher, 4, 5)
    assert max(max(mine) for mine in four) < 0.03
    assert [r.batch_size for r in records] == [4] * 5
    # Later, two clients: a probe waits out the delay and reaches 2, so batches of 2 go at once.
    await asyncio.sleep(1.05)
    records.clear()
    two = await _clients_in_step(batcher, 2, 5)
    assert two[0][0] >= 0.045
    assert max(max(mine[1:]) for mine in two) < 0.03
    assert [r.batch_size for r in records] == [2] * 5
    await batcher.stop(1.0)


async def test_adaptive_delay_waits_it_out_while_batches_grow_to_its_end_on_a_busy_loop() -> None:
    """A steady stream, one request a millisecond, grows every 40 ms wait to its end: on a loop
    whose thread reads as busy all the time (its CPU clock is the wall clock), the clients are
    not all in, and the delay is waited out; a lone client after it stops the waits in a few
    batches. On a loop with time to spare the same growth keeps the reach."""
    policy = BatchPolicy.from_config(
        parse_config(
            'name: "m" max_batch_size: 64 dynamic_batching { max_queue_delay_microseconds: 40000 }',
            "inline",
        )
    )

    async def stream(batcher: Batcher, seconds: float) -> None:
        tasks = []
        stop_s = time.monotonic() + seconds
        while time.monotonic() < stop_s and not batcher.waits_out_delay:
            tasks.append(asyncio.create_task(batcher.infer(_x(1), 1)))
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)

    busy = Batcher("m", [Doubler()], policy, loop_cpu_ns=time.monotonic_ns)
    await busy.start()
    await stream(busy, 5.0)
    assert busy.waits_out_delay  # what convoy_delay_waited_out reports
    loop = asyncio.get_running_loop()
    latencies = []
    for i in range(LEAVE_AFTER + 2):  # a lone client: each batch stops growing at once
        start = loop.time()
        await busy.infer(_x(i), 1)
        latencies.append(loop.time() - start)
    # The delay is waited out, LEAVE_AFTER batches at most (a straggler of the stream, queued
    # as it stopped, may have been one), and then the reach is 1 again.
    assert latencies[0] >= 0.035
    assert max(latencies[-2:]) < 0.02
    assert not busy.waits_out_delay
    await busy.stop(1.0)
    spare = Batcher("m", [Doubler()], policy, loop_cpu_ns=lambda: 0)
    await spare.start()
    await stream(spare, 0.3)
    assert not spare.waits_out_delay
    await spare.stop(1.0)


async def test_a_fault_of_the_loop_fails_the_requests_it_held_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batcher = Batcher(
        "m", [Doubler()], dynamic("max_queue_delay_microseconds: 5000"), gate=FaultyGate()
    )
    await batcher.start()
    held = await asyncio.gather(
        *(batcher.infer(_x(i), 1) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(answer, BatcherFaultError) for answer in held), held
    assert "not executed" in str(held[0])
    assert "the batch loop failed" in caplog.text and "a bug in the rate limiter" in caplog.text
    # The loop started again: the next requests are served, and stopping still works.
    assert float((await batcher.infer(_x(2), 1)).outputs["y"][0, 0]) == 4.0
    assert batcher.in_flight == 0
    await batcher.stop(1.0)


async def test_instances_can_be_added_and_retired_in_place() -> None:
    first, second = Doubler(0.05), Doubler(0.0)
    batcher = Batcher("m", [first], ONE_BY_ONE)
    await batcher.start()
    busy = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)
    batcher.add_executor(second)
    assert float((await batcher.infer(_x(2), 1)).outputs["y"][0, 0]) == 4.0  # on the new one
    assert second.calls
    retired = asyncio.create_task(batcher.retire_executor())
    assert await retired is second  # the idle one goes at once
    assert batcher.executor_count == 1
    with pytest.raises(ValueError, match="at least one"):
        await batcher.retire_executor()
    await busy
    await batcher.stop(1.0)


async def test_a_request_runs_alone_in_its_callers_task_when_nothing_waits() -> None:
    # Without dynamic batching and with the instance free, the request never queues: it runs
    # in the task that asked, and is counted like any other execution.
    executor = Doubler()
    records: list[ExecutionRecord] = []
    batcher = Batcher("m", [executor], ONE_BY_ONE, records.append)
    await batcher.start()
    result = await batcher.infer(_x(2), 1)
    assert float(result.outputs["y"][0, 0]) == 4.0
    assert executor.tasks == [asyncio.current_task()]
    assert [r.batch_size for r in records] == [1]
    with pytest.raises(RuntimeError, match="negative input"):
        await batcher.infer(_x(-1), 1)
    assert [r.succeeded for r in records] == [True, False]
    await batcher.stop(1.0)


async def test_a_request_cancelled_while_it_runs_alone_frees_the_instance() -> None:
    executor = Doubler(0.2)
    batcher = Batcher("m", [executor], ONE_BY_ONE)
    await batcher.start()
    running = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert batcher.in_flight == 0
    result = await asyncio.wait_for(batcher.infer(_x(3), 1), 1.0)
    assert float(result.outputs["y"][0, 0]) == 6.0
    await batcher.stop(1.0)


async def test_a_request_past_its_deadline_is_dropped_unexecuted() -> None:
    executor = Doubler(0.1)
    batcher = Batcher("m", [executor], dynamic(""))
    await batcher.start()
    busy = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)
    soon_ns = time.monotonic_ns() + 20_000_000
    # A caller's deadline, and a `timeout` parameter that no queue policy takes: both expire.
    results = await asyncio.gather(
        batcher.infer(_x(2), 1, deadline_ns=soon_ns),
        batcher.infer(_x(3), 1, timeout_ns=20_000_000),
        batcher.infer(_x(4), 1, deadline_ns=time.monotonic_ns() + 5_000_000_000),
        return_exceptions=True,
    )
    assert isinstance(results[0], DeadlineExceededError)
    assert "deadline passed" in str(results[0]) and "not executed" in str(results[0])
    assert isinstance(results[1], DeadlineExceededError)
    assert float(results[2].outputs["y"][0, 0]) == 8.0  # type: ignore[union-attr]
    await busy
    ran = [float(request["x"][0, 0]) for call in executor.calls for request in call]
    assert ran == [1.0, 4.0]
    with pytest.raises(DeadlineExceededError, match="had passed when it arrived"):
        await batcher.infer(_x(5), 1, deadline_ns=time.monotonic_ns() - 1)
    await batcher.stop(1.0)


async def test_a_deadline_that_cancels_a_queued_request_is_told_from_its_callers_leaving() -> None:
    # Under load the caller's deadline may cancel a queued request before the batcher's loop
    # looks: the cancellation then says that the request expired there, unexecuted.
    executor = Doubler(0.2)
    batcher = Batcher("m", [executor], dynamic(""))
    await batcher.start()
    busy = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)
    expiring = asyncio.create_task(
        batcher.infer(_x(2), 1, deadline_ns=time.monotonic_ns() + 30_000_000)
    )
    leaving = asyncio.create_task(
        batcher.infer(_x(3), 1, deadline_ns=time.monotonic_ns() + 5_000_000_000)
    )
    await asyncio.sleep(0.005)  # both queued behind the running batch
    time.sleep(0.05)  # the loop is held past the first deadline; gRPC cancels both now
    expiring.cancel()
    leaving.cancel()
    with pytest.raises(DeadlineCancelledError, match="not executed"):
        await expiring
    with pytest.raises(asyncio.CancelledError) as left:
        await leaving
    assert type(left.value) is asyncio.CancelledError  # its caller left long before its deadline
    await busy
    assert [float(call[0]["x"][0, 0]) for call in executor.calls] == [1.0]
    await batcher.stop(1.0)


async def test_a_timeout_the_queue_policy_takes_keeps_tritons_answer() -> None:
    from batching import RequestTimeoutError

    batcher = Batcher(
        "m",
        [Doubler(0.1)],
        dynamic("default_queue_policy { allow_timeout_override: true }"),
    )
    await batcher.start()
    busy = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)
    late = await asyncio.gather(
        batcher.infer(_x(2), 1, timeout_ns=10_000_000), return_exceptions=True
    )
    assert isinstance(late[0], RequestTimeoutError)
    await busy
    await batcher.stop(1.0)


async def test_a_batch_waiting_for_an_instance_loses_its_expired_requests() -> None:
    # Without dynamic batching requests wait for the one instance; the one whose deadline
    # passes meanwhile is never executed, the others run in order.
    executor = Doubler(0.05)
    batcher = Batcher("m", [executor], ONE_BY_ONE)
    await batcher.start()
    first = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.005)
    results = await asyncio.gather(
        batcher.infer(_x(2), 1, deadline_ns=time.monotonic_ns() + 20_000_000),
        batcher.infer(_x(3), 1),
        return_exceptions=True,
    )
    await first
    assert isinstance(results[0], DeadlineExceededError)
    assert [float(call[0]["x"][0, 0]) for call in executor.calls] == [1.0, 3.0]
    await batcher.stop(1.0)


async def test_fair_share_takes_a_light_client_in_before_a_heavy_clients_backlog() -> None:
    # The first batch runs until the backlog and the light request are all queued: held, not
    # timed (a 100 ms batch once ended first on a loaded machine, 20 ms more often).
    executor = Doubler()
    executor.hold = asyncio.Event()
    policy = replace(dynamic(""), max_batch_size=2, preferred_batch_sizes=(2,), fair_share=True)
    batcher = Batcher("m", [executor], policy)
    await batcher.start()
    busy = asyncio.create_task(batcher.infer(_x(0), 1, share="heavy"))
    await asyncio.sleep(0.005)
    heavy = [asyncio.create_task(batcher.infer(_x(i), 1, share="heavy")) for i in range(1, 7)]
    await asyncio.sleep(0.001)
    light = asyncio.create_task(batcher.infer(_x(100), 1, share="light"))
    await asyncio.sleep(0.01)  # every task has run into the queue
    executor.hold.set()
    await asyncio.gather(busy, light, *heavy)
    batches = [[float(r["x"][0, 0]) for r in call] for call in executor.calls]
    # The light client, served least lately, leads the next batch; the backlog fills the rest.
    assert batches[1] == [100.0, 1.0]
    await batcher.stop(1.0)


async def test_a_request_that_could_not_finish_by_its_deadline_is_not_started() -> None:
    executor = Doubler(0.05)
    batcher = Batcher("m", [executor], dynamic(""))
    await batcher.start()
    await batcher.infer(_x(1), 1)  # a batch takes about 50 ms
    busy = asyncio.create_task(batcher.infer(_x(2), 1))
    await asyncio.sleep(0.005)
    # Its turn comes in about 45 ms, with 70 ms left: it would answer at about 95 ms, too late.
    late = batcher.infer(_x(3), 1, deadline_ns=time.monotonic_ns() + 70_000_000)
    with pytest.raises(DeadlineExceededError):
        await late
    await busy
    assert len(executor.calls) == 2
    with pytest.raises(DeadlineExceededError, match="would before a batch could finish"):
        await batcher.infer(_x(4), 1, deadline_ns=time.monotonic_ns() + 20_000_000)
    await batcher.stop(1.0)


async def test_arrivals_during_a_delay_still_complete_a_preferred_batch_at_once() -> None:
    """The loop sleeps through arrivals that cannot end its wait, but not through the one that
    reaches a preferred size, nor through one whose deadline comes before the delay ends."""
    executor = Doubler()
    batcher = Batcher(
        "m",
        [executor],
        dynamic("preferred_batch_size: [3] max_queue_delay_microseconds: 10000000"),
    )
    await batcher.start()
    started_s = time.monotonic()
    first = asyncio.create_task(batcher.infer(_x(1), 1))
    await asyncio.sleep(0.01)  # the loop now waits out the 10 s delay for a batch of one
    expiring = asyncio.create_task(
        batcher.infer(_x(2), 1, deadline_ns=time.monotonic_ns() + 50_000_000)
    )
    with pytest.raises(DeadlineExceededError):
        await expiring
    assert time.monotonic() - started_s < 5  # dropped at its deadline, not after the delay
    results = await asyncio.gather(first, batcher.infer(_x(3), 1), batcher.infer(_x(4), 1))
    assert time.monotonic() - started_s < 5  # the third request made the preferred batch
    assert [float(r.outputs["y"][0, 0]) for r in results] == [2.0, 6.0, 8.0]
    assert [len(call) for call in executor.calls] == [3]
    await batcher.stop(1.0)


async def _scattered(batcher: Batcher, seconds: float, waiting_s: float | None = None) -> None:
    """Requests one at a time, a few turns of the loop apart, as unary gRPC calls reach the
    batcher on a busy loop, for `seconds`; with `waiting_s`, until the batcher has waited for
    batch-mates that long (`seconds` then bounds the whole)."""
    tasks = []
    stop_s = time.monotonic() + seconds
    waits_since_s: float | None = None
    while time.monotonic() < stop_s:
        tasks.append(asyncio.create_task(batcher.infer(_x(1), 1)))
        for _ in range(3):
            await asyncio.sleep(0)
        if waiting_s is not None and batcher.waits_for_batch_mates:
            waits_since_s = waits_since_s or time.monotonic()
            if time.monotonic() - waits_since_s >= waiting_s:
                break
    await asyncio.gather(*tasks)


async def test_natural_batching_waits_for_batch_mates_only_on_a_saturated_loop() -> None:
    """Without a queue delay, scattered requests run one at a time; once the loop's thread reads
    as busy all the time (here its CPU clock is the wall clock) while other requests are in
    flight (one holds a second instance), batches wait for batch-mates."""
    records: list[ExecutionRecord] = []
    policy = dynamic("")
    slow, fast = Doubler(delay_s=2.0), Doubler()
    saturated = Batcher("m", [slow, fast], policy, records.append, loop_cpu_ns=time.monotonic_ns)
    await saturated.start()
    held = asyncio.create_task(saturated.infer(_x(1), 1))
    for _ in range(100):  # the slow instance takes it: another request always in flight
        if slow.running:
            break
        await asyncio.sleep(0)
    assert slow.running
    # Until the batcher has waited for batch-mates for 0.1 s: its windows (20 ms each, five
    # before the waits begin) pass in loop turns, which a busy test process makes longer.
    await _scattered(saturated, 5.0, waiting_s=0.1)
    sizes = [record.batch_size for record in records]
    assert max(sizes[:5]) == 1  # the first windows measure; batches go at once meanwhile
    assert max(sizes[-10:]) > 1
    assert saturated.waits_for_batch_mates  # what convoy_natural_batching reports
    await held
    await saturated.stop(1.0)
    # One request at a time, however busy the loop reads (a lone client, the idle poll keeping
    # its loop busy between requests): no batch-mates can come, so batches never wait.
    records.clear()
    alone = Batcher("m", [Doubler()], dynamic(""), records.append, loop_cpu_ns=time.monotonic_ns)
    await alone.start()
    await _scattered(alone, 0.3)
    assert max(record.batch_size for record in records) == 1
    assert not alone.waits_for_batch_mates
    await alone.stop(1.0)
    # An idle loop (its CPU clock stands still), or the parameter off: batches go at once.
    opted_out = parse_config(
        'name: "m" max_batch_size: 8 dynamic_batching { } '
        'parameters { key: "convoy_natural_batching" value: { string_value: "false" } }',
        "inline",
    )
    for policy, clock in ((dynamic(""), lambda: 0), (BatchPolicy.from_config(opted_out), None)):
        records.clear()
        batcher = Batcher(
            "m", [Doubler()], policy, records.append, loop_cpu_ns=clock or time.monotonic_ns
        )
        await batcher.start()
        await _scattered(batcher, 0.1)
        assert sum(r.batch_size for r in records) / len(records) < 1.5
        assert not batcher.waits_for_batch_mates
        await batcher.stop(1.0)
