"""The sequence batcher: slot selection as a pure function, and the batcher with an executor that
adds INPUT to the state it is fed (controls and implicit state as a model sees them)."""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from batching import (
    BatcherClosedError,
    BatcherFaultError,
    DeadlineExceededError,
    ExecutionRecord,
    ExecutorContractError,
    Needs,
    Parameters,
    RateLimiter,
    ResourceWait,
    SequenceBatcher,
    SequenceError,
    SequenceLostError,
    SequencePolicy,
    SequenceStep,
    Strategy,
    TensorMap,
    ready_batch,
)
from server.contract.errors import ConfigError
from server.core.repository import parse_config
from server.core.repository._sequence import sequence_policy
from tests.batching.faults import FaultyGate

CONFIG = """
name: "acc"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 50000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "STATE" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
  %s
}
"""


def _policy(strategy: str = "", **changes: object) -> SequencePolicy:
    config = parse_config(CONFIG % strategy, "inline")
    return replace(sequence_policy(config, Path(".")), **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Result:
    responses: list[dict[str, np.ndarray] | Exception]
    compute_input_ns: int = 1
    compute_infer_ns: int = 2
    compute_output_ns: int = 3
    rescheduled: frozenset[int] = frozenset()


class Accumulator:
    """OUTPUT = STATE + INPUT for ready positions; records every batch it was fed."""

    def __init__(self, name: str = "acc_0", delay_s: float = 0.0) -> None:
        self.name = name
        self.restarts = 0  # a test replaces its "worker" by counting one more
        self.delay_s = delay_s
        self.batches: list[Sequence[TensorMap]] = []
        self.parameters: list[Sequence[Parameters]] = []

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        self.batches.append(requests)
        self.parameters.append(parameters)
        await asyncio.sleep(self.delay_s)
        responses: list[dict[str, np.ndarray] | Exception] = []
        for request in requests:
            total = request["STATE"] + request["INPUT"] * request["READY"].astype(np.int32)
            responses.append({"OUTPUT": total, "STATE_OUT": total})
        return Result(responses)


def _input(value: int) -> dict[str, np.ndarray]:
    return {"INPUT": np.array([[value]], np.int32)}


async def _send(
    batcher: SequenceBatcher,
    sequence: int | str,
    value: int,
    start: bool = False,
    end: bool = False,
) -> int:
    result = await batcher.infer(_input(value), 1, sequence=SequenceStep(sequence, start, end))
    assert "STATE_OUT" not in result.outputs  # the state is the server's
    return int(result.outputs["OUTPUT"][0, 0])


def test_policy_from_config() -> None:
    policy = _policy()
    assert policy.strategy is Strategy.DIRECT
    assert policy.slots == 4 and policy.batching and policy.idle_ns == 50_000_000
    assert [c.name for c in policy.controls] == ["START", "READY", "END", "CORRID"]
    assert policy.states[0].initial.tolist() == [0]
    oldest = _policy("oldest { max_candidate_sequences: 6 preferred_batch_size: [ 2, 4 ] }")
    assert oldest.strategy is Strategy.OLDEST
    assert oldest.slots == 6 and oldest.preferred_batch_sizes == (2, 4)


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        ("oldest { preferred_batch_size: [ 8 ] }", "preferred batch size must be <= max batch"),
        ("direct { minimum_slot_utilization: 1.5 }", "minimum slot utilization must be in range"),
    ],
)
def test_policy_refuses_what_triton_refuses(strategy: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _policy(strategy)


def test_policy_needs_two_control_values() -> None:
    config = parse_config(
        'name: "m" max_batch_size: 1 sequence_batching { control_input [ { name: "S" control '
        "[ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } ] } ] }",
        "inline",
    )
    with pytest.raises(ConfigError, match="exactly one of int32_false_true"):
        sequence_policy(config, Path("."))


def test_direct_selection_pads_empty_slots_and_waits_for_utilization() -> None:
    policy = _policy(max_queue_delay_ns=1000, minimum_slot_utilization=0.75)
    slots = [(10, 1), None, (20, 2), None]
    waiting = ready_batch(slots, policy, now_ns=500)
    assert waiting.positions == () and waiting.wait_until_ns == 1010
    assert ready_batch(slots, policy, now_ns=1010).positions == (0, None, 2)
    full = [(10, 1), (11, 2), (12, 3), None]
    assert ready_batch(full, policy, now_ns=100).positions == (0, 1, 2)
    assert ready_batch([None] * 4, policy, now_ns=0).positions == ()
    # Without a utilization threshold Triton runs at once, whatever the delay.
    eager = replace(policy, minimum_slot_utilization=0.0)
    assert ready_batch(slots, eager, now_ns=0).positions == (0, None, 2)


def test_oldest_selection_takes_the_oldest_and_waits_for_a_preferred_size() -> None:
    policy = _policy(
        "oldest { max_candidate_sequences: 6 }",
        max_queue_delay_ns=1000,
        preferred_batch_sizes=(2,),
        max_batch_size=3,
    )
    slots = [(30, 3), None, (10, 1), None, (20, 2), (40, 4)]
    assert ready_batch(slots, policy, now_ns=0).positions == (2, 4, 0)
    one = [None, (10, 1), None, None, None, None]
    assert ready_batch(one, policy, now_ns=500).wait_until_ns == 1010
    assert ready_batch(one, policy, now_ns=1010).positions == (1,)
    two = [(10, 1), (20, 2), None, None, None, None]
    assert ready_batch(two, policy, now_ns=500).positions == (0, 1)


async def test_interleaved_sequences_keep_their_own_totals() -> None:
    executor = Accumulator(delay_s=0.005)  # long enough for requests to meet in batches
    batcher = SequenceBatcher("acc:1", [executor], _policy())
    await batcher.start()

    async def client(sequence: int, values: list[int]) -> list[int]:
        totals = []
        for index, value in enumerate(values):
            start, end = index == 0, index == len(values) - 1
            totals.append(await _send(batcher, sequence, value, start, end))
        return totals

    values = {sequence: list(range(sequence, sequence + 6)) for sequence in range(1, 5)}
    answers = await asyncio.gather(*(client(s, v) for s, v in values.items()))
    for (sequence, sent), totals in zip(values.items(), answers, strict=True):
        assert totals == list(np.cumsum(sent)), sequence
    assert any(len(batch) > 1 for batch in executor.batches)  # sequences batched together
    assert batcher.in_flight == 0 and batcher.queue_depth == 0
    await batcher.stop(1.0)


async def test_controls_and_null_requests_reach_the_model() -> None:
    executor = Accumulator(delay_s=0.02)
    batcher = SequenceBatcher("acc:1", [executor], _policy())
    await batcher.start()
    first = asyncio.create_task(_send(batcher, 11, 1, start=True))
    await asyncio.sleep(0.005)  # sequence 11 takes slot 0 and runs alone
    second = asyncio.create_task(_send(batcher, 22, 5, start=True))  # slot 1
    await first
    third = asyncio.create_task(_send(batcher, 22, 5, end=True))
    assert await second == 5 and await third == 10
    last = executor.batches[-1]  # slot 0 (sequence 11) has nothing ready: a null request
    assert len(last) == 2
    assert last[0]["READY"].tolist() == [[0.0]] and last[0]["CORRID"].tolist() == [[0]]
    assert last[1]["READY"].tolist() == [[1.0]] and last[1]["END"].tolist() == [[True]]
    assert last[1]["CORRID"].tolist() == [[22]] and last[1]["START"].tolist() == [[0]]
    # The executor gets each request's correlation id, and its START and END flags where set
    # (a Python model's correlation_id() and flags()); a null request gets none.
    assert [[dict(each) for each in batch] for batch in executor.parameters] == [
        [{"sequence_id": 11, "sequence_start": True}],
        [{}, {"sequence_id": 22, "sequence_start": True}],
        [{}, {"sequence_id": 22, "sequence_end": True}],
    ]
    await batcher.stop(1.0)


async def test_sequence_errors_use_tritons_wording() -> None:
    batcher = SequenceBatcher("acc:1", [Accumulator()], _policy())
    await batcher.start()
    with pytest.raises(SequenceError, match="must specify a non-zero or non-empty correlation ID"):
        await batcher.infer(_input(1), 1)
    with pytest.raises(SequenceError, match="must specify the START flag on the first request"):
        await _send(batcher, 5, 1)
    with pytest.raises(SequenceError, match="must specify batch-size 1"):
        await batcher.infer(_input(1), 2, sequence=SequenceStep(5, start=True))
    with pytest.raises(SequenceError, match="string correlation ID"):
        await _send(batcher, "text", 1, start=True)
    assert await _send(batcher, 5, 3, start=True, end=True) == 3
    with pytest.raises(SequenceError, match="START flag"):  # ended: unknown again
        await _send(batcher, 5, 1)
    await batcher.stop(1.0)


async def test_idle_sequences_are_released() -> None:
    batcher = SequenceBatcher("acc:1", [Accumulator()], _policy(idle_ns=20_000_000))
    await batcher.start()
    assert await _send(batcher, 9, 4, start=True) == 4
    assert await _send(batcher, 9, 4) == 8
    await asyncio.sleep(0.06)
    with pytest.raises(SequenceError, match="START flag"):
        await _send(batcher, 9, 4)
    await batcher.stop(1.0)


async def test_backlog_waits_for_a_free_slot() -> None:
    executor = Accumulator()
    batcher = SequenceBatcher("acc:1", [executor], _policy(slots=1, max_batch_size=1))
    await batcher.start()
    assert await _send(batcher, 1, 1, start=True) == 1
    backlogged = asyncio.create_task(_send(batcher, 2, 7, start=True, end=True))
    await asyncio.sleep(0.01)
    assert not backlogged.done()  # sequence 1 holds the only slot
    assert await _send(batcher, 1, 1, end=True) == 2
    assert await backlogged == 7
    await batcher.stop(1.0)


async def test_a_sequence_begun_before_its_instance_restarted_must_start_again() -> None:
    """The instance's worker was replaced, and with it the state its model kept: the sequences
    begun before fail their requests, never executed, until they start again (an END ends
    one and frees its slot); a sequence begun after runs on."""
    executor = Accumulator()
    batcher = SequenceBatcher("acc:1", [executor], _policy(slots=2))
    await batcher.start()
    assert await _send(batcher, 1, 5, start=True) == 5
    assert await _send(batcher, 2, 7, start=True) == 7
    executor.restarts = 1
    lost = "sequence 1 lost its state: instance 'acc_0' was restarted since the sequence began"
    with pytest.raises(SequenceLostError, match=lost):
        await _send(batcher, 1, 1)
    with pytest.raises(SequenceLostError, match=lost):
        await _send(batcher, 1, 1, end=True)
    with pytest.raises(SequenceError, match="START flag"):
        await _send(batcher, 1, 1)
    assert await _send(batcher, 3, 2, start=True) == 2  # in the slot sequence 1's END freed
    assert await _send(batcher, 3, 2) == 4
    assert await _send(batcher, 2, 10, start=True) == 10  # started again, without an END
    assert await _send(batcher, 2, 1, end=True) == 11
    assert len(executor.batches) == 6  # the lost sequence's requests never ran
    assert batcher.in_flight == 0 and batcher.queue_depth == 0
    await batcher.stop(1.0)


async def test_sequences_spread_over_instances_and_retire_waits_for_them() -> None:
    executors = [Accumulator("acc_0"), Accumulator("acc_1")]
    records: list[ExecutionRecord] = []
    batcher = SequenceBatcher("acc:1", executors, _policy(), records.append)
    await batcher.start()
    assert await _send(batcher, 1, 1, start=True) == 1
    assert await _send(batcher, 2, 2, start=True) == 2
    assert all(executor.batches for executor in executors)  # one sequence on each
    retiring = asyncio.create_task(batcher.retire_executor())
    await asyncio.sleep(0.01)
    assert not retiring.done()  # its sequence has not ended
    assert await _send(batcher, 1, 1, end=True) == 2
    assert await _send(batcher, 2, 2, end=True) == 4
    retired = await asyncio.wait_for(retiring, 1.0)
    assert retired in executors and batcher.executor_count == 1
    assert len(records) == 4 and all(r.succeeded for r in records)
    await batcher.stop(1.0)


async def test_stop_refuses_new_requests() -> None:
    batcher = SequenceBatcher("acc:1", [Accumulator()], _policy())
    await batcher.start()
    await batcher.stop(1.0)
    with pytest.raises(BatcherClosedError):
        await _send(batcher, 1, 1, start=True)


class Timed(Accumulator):
    """An accumulator that records when each execution starts and ends."""

    def __init__(self, name: str, timeline: list[tuple[str, str]]) -> None:
        super().__init__(name, delay_s=0.005)
        self.timeline = timeline

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        self.timeline.append(("start", self.name))
        try:
            return await super().execute(requests, parameters, device_outputs)
        finally:
            self.timeline.append(("end", self.name))


async def test_sequence_batchers_wait_for_the_rate_limiters_resources() -> None:
    """Two stateful models sharing one resource of count 1 never execute at the same time."""
    limiter, timeline = RateLimiter(), []
    batchers = []
    for name in ("a", "b"):
        executor = Timed(name, timeline)
        limiter.register(executor, Needs({("R", -1): 1}), ResourceWait())
        batchers.append(SequenceBatcher(name, [executor], _policy(), gate=limiter))
        await batchers[-1].start()

    async def run(batcher: SequenceBatcher, sequence: int) -> list[int]:
        return [await _send(batcher, sequence, 1, step == 0, step == 4) for step in range(5)]

    answers = await asyncio.gather(*(run(b, s) for b in batchers for s in (1, 2)))
    assert all(totals == [1, 2, 3, 4, 5] for totals in answers)
    running = 0
    for event, _ in timeline:
        running += 1 if event == "start" else -1
        assert running <= 1
    for batcher in batchers:
        await batcher.stop(1.0)


class Forgetful(Accumulator):
    """Answers one request fewer than it was given."""

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        answered = await super().execute(requests, parameters, device_outputs)
        return Result(answered.responses[1:])


async def test_an_executor_that_loses_a_response_fails_its_batch_and_frees_the_slot() -> None:
    batcher = SequenceBatcher("acc:1", [Forgetful()], _policy())
    await batcher.start()
    with pytest.raises(ExecutorContractError, match="answered 0 of the batch's 1 requests"):
        await _send(batcher, 7, 1, start=True, end=True)
    assert batcher.in_flight == 0 and batcher.queue_depth == 0
    await batcher.stop(1.0)


async def test_a_fault_of_the_loop_fails_the_waiting_requests_and_the_loop_goes_on() -> None:
    batcher = SequenceBatcher("acc:1", [Accumulator()], _policy(), gate=FaultyGate())
    await batcher.start()
    with pytest.raises(BatcherFaultError, match="not executed"):
        await _send(batcher, 7, 1, start=True)
    # The loop started again: a sequence runs as ever.
    assert [await _send(batcher, 8, v, v == 1, v == 3) for v in (1, 2, 3)] == [1, 3, 6]
    await batcher.stop(1.0)


async def test_a_sequence_request_waiting_past_its_deadline_is_dropped_unexecuted() -> None:
    executor = Accumulator(delay_s=0.05)
    batcher = SequenceBatcher("acc:1", [executor], _policy())
    await batcher.start()
    first = asyncio.create_task(_send(batcher, 7, 1, start=True))
    await asyncio.sleep(0.01)  # the first request of sequence 7 is running
    late = batcher.infer(
        _input(10), 1, sequence=SequenceStep(7), deadline_ns=time.monotonic_ns() + 10_000_000
    )
    timed = batcher.infer(_input(100), 1, sequence=SequenceStep(7), timeout_ns=10_000_000)
    results = await asyncio.gather(late, timed, return_exceptions=True)
    assert all(isinstance(r, DeadlineExceededError) for r in results), results
    assert "not executed" in str(results[0])
    assert await first == 1
    assert await _send(batcher, 7, 2, end=True) == 3  # the dropped ones never touched the state
    assert len(executor.batches) == 2
    with pytest.raises(DeadlineExceededError, match="had passed when it arrived"):
        await batcher.infer(
            _input(1), 1, sequence=SequenceStep(8, start=True), deadline_ns=time.monotonic_ns()
        )
    await batcher.stop(1.0)


class Countdown:
    """An iterative sequence's model: runs each request INPUT times, rescheduling it until then,
    and answers OUTPUT = the number of runs; records each batch's (correlation id, START)."""

    def __init__(self, delay_s: float = 0.005) -> None:
        self.name = "countdown_0"
        self.restarts = 0
        self.delay_s = delay_s
        self.runs: dict[int | str, int] = {}
        self.batches: list[list[tuple[int | str, bool]]] = []

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Result:
        await asyncio.sleep(self.delay_s)
        seen: list[tuple[int | str, bool]] = []
        responses: list[dict[str, np.ndarray] | Exception] = []
        again = set()
        for index, (request, shown) in enumerate(zip(requests, parameters, strict=True)):
            correlation_id, start = shown["sequence_id"], bool(shown.get("sequence_start"))
            assert isinstance(correlation_id, int | str) and "sequence_end" not in shown
            seen.append((correlation_id, start))
            runs = self.runs[correlation_id] = (0 if start else self.runs[correlation_id]) + 1
            if runs < int(request["INPUT"][0, 0]):
                again.add(index)
                responses.append({})
            else:
                responses.append({"OUTPUT": np.array([[runs]], np.int32)})
        self.batches.append(seen)
        return Result(responses, rescheduled=frozenset(again))


def _iterative(**changes: object) -> SequencePolicy:
    oldest = "oldest { max_candidate_sequences: 4 }"
    return _policy(oldest, states=(), iterative=True, **changes)


async def _run_times(batcher: SequenceBatcher, times: int, sequence: int = 0) -> int:
    result = await batcher.infer(_input(times), 1, sequence=SequenceStep(sequence))
    return int(result.outputs["OUTPUT"][0, 0])


async def test_an_iterative_request_runs_until_its_model_stops_rescheduling_it() -> None:
    executor = Countdown()
    records: list[ExecutionRecord] = []
    batcher = SequenceBatcher("countdown:1", [executor], _iterative(), records.append)
    await batcher.start()
    first = [asyncio.create_task(_run_times(batcher, times)) for times in (1, 3, 6)]
    await asyncio.sleep(0.012)  # the first two batches ran: a newcomer joins the iterations
    later = asyncio.create_task(_run_times(batcher, 2))
    assert await asyncio.gather(*first, later) == [1, 3, 6, 2]
    # Each request got a correlation id of its own, START on its first run only.
    runs: dict[int | str, list[bool]] = {}
    for batch in executor.batches:
        for correlation_id, start in batch:
            runs.setdefault(correlation_id, []).append(start)
    assert sorted(len(starts) for starts in runs.values()) == [1, 2, 3, 6]
    assert all(starts == [True] + [False] * (len(starts) - 1) for starts in runs.values())
    # Continuous batching: the newcomer's first run shared a batch with rescheduled requests.
    assert any(
        any(start for _, start in batch) and not all(start for _, start in batch)
        for batch in executor.batches
    )
    assert sum(record.request_count for record in records) == 1 + 3 + 6 + 2
    assert batcher.in_flight == 0 and batcher.queue_depth == 0
    # A request that names a correlation id keeps it, and a running one's id is refused.
    named = asyncio.create_task(_run_times(batcher, 4, sequence=77))
    await asyncio.sleep(0.002)
    with pytest.raises(SequenceError, match="still running"):
        await _run_times(batcher, 1, sequence=77)
    assert await named == 4 and 77 in executor.runs
    await batcher.stop(1.0)


async def test_a_rescheduled_request_that_leaves_frees_its_slot() -> None:
    executor = Countdown()
    batcher = SequenceBatcher("countdown:1", [executor], _iterative(slots=1, max_batch_size=1))
    await batcher.start()
    endless = asyncio.create_task(_run_times(batcher, 10**6))
    await asyncio.sleep(0.02)  # rescheduled again and again in the only slot
    endless.cancel()
    with pytest.raises(asyncio.CancelledError):
        await endless
    assert await _run_times(batcher, 2) == 2  # the slot is free again
    # A deadline that passes between two runs ends the request, and frees the slot too.
    with pytest.raises(DeadlineExceededError, match="not executed"):
        await batcher.infer(_input(10**6), 1, timeout_ns=30_000_000)
    assert await _run_times(batcher, 1) == 1
    await batcher.stop(1.0)
