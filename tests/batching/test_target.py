"""The latency target's rules: batch times, the plan (batch bound and delay) and refusals, with
explicit times; and a batcher that refuses at once when its queue is over the target."""

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from batching import Batcher, BatchPolicy, LatencyTargetError, Parameters, PolicyError, TensorMap
from batching.target import (
    BatchTimes,
    Correction,
    Load,
    TargetKeeper,
    TargetPlan,
    plan,
    predicted_ns,
)
from server.core.repository import parse_config

MS = 1_000_000


def policy(target_ms: str = "50", batching: str = "", max_batch_size: int = 8) -> BatchPolicy:
    config = parse_config(
        f'name: "m" max_batch_size: {max_batch_size} dynamic_batching {{ {batching} }} '
        f'parameters {{ key: "convoy_latency_target_ms" value {{ string_value: "{target_ms}" }} }}',
        "inline",
    )
    return BatchPolicy.from_config(config)


def times(**by_size: float) -> BatchTimes:
    """Batch times in ms, measured steadily (no spread): times(b1=10, b4=20)."""
    measured = BatchTimes()
    for name, ms in by_size.items():
        measured.record(int(name[1:]), int(ms * MS))
    return measured


def test_the_target_is_read_from_the_config_and_a_bad_one_is_refused() -> None:
    assert policy("50").latency_target_ns == 50 * MS
    assert policy("12.5").latency_target_ns == 12_500_000
    for bad in ("0", "-3", "fast", "nan", "inf"):
        with pytest.raises(PolicyError, match="convoy_latency_target_ms"):
            policy(bad)


def test_batch_times_interpolate_between_sizes_and_grow_past_the_largest() -> None:
    measured = times(b1=10, b4=16)
    assert measured.predict_ns(1) == 10 * MS
    assert measured.predict_ns(2) == pytest.approx(12 * MS)
    assert measured.predict_ns(8) == pytest.approx(32 * MS)
    assert BatchTimes().predict_ns(1) is None


def test_a_noisy_size_is_predicted_high() -> None:
    measured = BatchTimes()
    for ms in (10, 20, 10, 20, 10, 20):
        measured.record(1, ms * MS)
    predicted = measured.predict_ns(1)
    assert predicted is not None and predicted > 20 * MS


def test_the_plan_bounds_the_batch_to_half_the_target_and_the_delay_to_what_is_left() -> None:
    # b8 takes 40 ms: too long for a 50 ms target; b4 (22.9 ms, interpolated) fits twice,
    # b5 (27.1) does not. The delay is what the target leaves: 50 - 2 x 22.9 ms.
    chosen = plan(times(b1=10, b8=40), policy("50"))
    assert chosen.max_batch_size == 4
    assert chosen.max_queue_delay_ns == pytest.approx(50 * MS - 2 * (10 + 30 * 3 / 7) * MS)
    # A generous target takes the whole batch; the delay is at most one batch's time.
    assert plan(times(b1=10, b8=40), policy("500")) == TargetPlan(8, 40 * MS)
    # The model's own max_queue_delay bounds it; before any measurement the config holds.
    assert plan(times(b1=10, b8=40), policy("500", "max_queue_delay_microseconds: 100"))
    assert plan(BatchTimes(), policy("50", "max_queue_delay_microseconds: 100")) == TargetPlan(
        8, 100_000
    )
    # Even one request over half the target: batches of one, no delay.
    assert plan(times(b1=30), policy("50")) == TargetPlan(1, 0)


def test_a_request_is_predicted_from_the_work_ahead_of_it() -> None:
    measured, chosen = times(b1=5, b4=10), TargetPlan(4, 0)
    # Idle: its own batch of one.
    assert predicted_ns(measured, chosen, Load(0, 0, 1)) == 5 * MS
    # 9 queued: two full batches ahead (10 ms each) after 3 ms of a running one; its own
    # holds 2 (6.67 ms, interpolated).
    expected = (3 + 2 * 10 + 5 + 5 / 3) * MS
    assert predicted_ns(measured, chosen, Load(9, 3 * MS, 1)) == pytest.approx(expected)
    # Two instances take the full batches two at a time.
    assert predicted_ns(measured, chosen, Load(9, 3 * MS, 2)) == pytest.approx(expected - 10 * MS)
    # Nothing measured yet: no prediction.
    assert predicted_ns(BatchTimes(), chosen, Load(100, 0, 1)) is None


def test_a_request_is_refused_when_its_prediction_passes_the_target() -> None:
    keeper = TargetKeeper("m", policy("50"), times(b1=20))
    keeper.chosen = TargetPlan(1, 0)
    keeper.started("instance", 0, 1)
    # At 10 ms: 10 ms left of the running batch, then its own (20): 30 ms, taken. One more
    # queued ahead: 50 ms, still inside; two: 70 ms, refused.
    assert keeper.admit(10 * MS, queued=0, idle=False, instances=1) == pytest.approx(30 * MS)
    assert keeper.admit(10 * MS, queued=1, idle=False, instances=1) == pytest.approx(50 * MS)
    with pytest.raises(LatencyTargetError, match="about 70 ms with 2 queued") as refused:
        keeper.admit(10 * MS, queued=2, idle=False, instances=1)
    # 20 ms over: once the work ahead has run 20 ms more, the same request fits again. A second
    # refused at the same moment is told to come one request (20 ms) later, a third later still.
    assert refused.value.retry_after_ns == pytest.approx(20 * MS)
    assert "retry in 20 ms" in str(refused.value)
    turns = []
    for _ in range(2):
        with pytest.raises(LatencyTargetError) as again:
            keeper.admit(10 * MS, queued=2, idle=False, instances=1)
        turns.append(again.value.retry_after_ns)
    assert turns == [pytest.approx(40 * MS), pytest.approx(60 * MS)]
    # Once those turns have passed, a refusal is told its own excess again: at 200 ms the
    # running batch is predicted done, so two queued and its own take 60 ms, 10 over.
    with pytest.raises(LatencyTargetError) as later:
        keeper.admit(200 * MS, queued=2, idle=False, instances=1)
    assert later.value.retry_after_ns == pytest.approx(10 * MS)
    # Clients that resend at once, ignoring their turns, push the line no further than a second
    # past a refusal's own excess; past that it starts again at the excess.
    hints = []
    for _ in range(1000):
        with pytest.raises(LatencyTargetError) as flooded:
            keeper.admit(200 * MS, queued=2, idle=False, instances=1)
        hints.append(flooded.value.retry_after_ns)
    assert max(hints) <= 1010 * MS + 1_000 and min(hints) == pytest.approx(10 * MS)
    # One that runs at once: taken, predicted all the same (its own batch); nothing measured
    # yet: taken, with no prediction.
    assert keeper.admit(10 * MS, queued=0, idle=True, instances=1) == pytest.approx(20 * MS)
    fresh = TargetKeeper("m", policy("50"), BatchTimes())
    assert fresh.admit(0, queued=100, idle=False, instances=1) == 0.0


def test_the_correction_is_the_p99_of_answers_over_their_predictions() -> None:
    correction = Correction()
    for _ in range(31):
        correction.observe(15 * MS, 10 * MS)
    assert correction.scale == 1.0, "nothing learned before 32 answers"
    correction.observe(15 * MS, 10 * MS)
    assert correction.scale == pytest.approx(1.5)
    # 250 answers on time and 6 at twice their prediction: the p99 is 2 (6 of 256 is 2.3%).
    for n in range(256):
        correction.observe((20 if n % 43 == 0 else 10) * MS, 10 * MS)
    assert correction.scale == pytest.approx(2.0)
    # The machine quietens: answers at 0.8 of their predictions bring it down, within bounds.
    for _ in range(256):
        correction.observe(8 * MS, 10 * MS)
    assert correction.scale == pytest.approx(0.8)
    for _ in range(256):
        correction.observe(1 * MS, 10 * MS)
    assert correction.scale == 0.5
    for _ in range(256):
        correction.observe(100 * MS, 10 * MS)
    assert correction.scale == 4.0


def test_answers_that_run_late_tighten_admission_and_the_plan() -> None:
    keeper = TargetKeeper("m", policy("50"), times(b1=10, b8=40))
    keeper.chosen = TargetPlan(1, 0)
    keeper.started("instance", 0, 1)
    assert keeper.admit(5 * MS, queued=2, idle=False, instances=1) == pytest.approx(35 * MS)
    assert plan(keeper.times, policy("50")).max_batch_size == 4  # 2 x 22.9 ms fit in 50
    for _ in range(64):  # answers take 1.5x their predictions
        keeper.answered(45 * MS, 30 * MS)
    with pytest.raises(LatencyTargetError, match="about 52 ms with 2 queued") as refused:
        keeper.admit(5 * MS, queued=2, idle=False, instances=1)
    assert refused.value.retry_after_ns == pytest.approx(2.5 * MS)  # scaled, as the prediction
    # The plan keeps two batches inside 50 / 1.5 ms: batches of 2 (14.3 ms) now.
    assert keeper.measured(0).max_batch_size == 2
    for _ in range(64):  # nor one without a prediction (none measured), nor a tiny one
        keeper.answered(100 * MS, 0.0)
        keeper.answered(100 * MS, 6 * MS)
    assert keeper.correction.scale == pytest.approx(1.5)


@dataclass(frozen=True)
class Answered:
    responses: list[dict[str, np.ndarray] | Exception]
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    rescheduled: frozenset[int] = frozenset()


class Sleeper:
    """Answers each request with its input after `delay_s` per batch."""

    name = "sleeper"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Answered:
        await asyncio.sleep(self.delay_s)
        return Answered([dict(r) for r in requests])


async def test_a_batcher_over_its_target_refuses_at_once_and_serves_what_it_accepted() -> None:
    batcher = Batcher("m", [Sleeper(0.03)], policy("100", max_batch_size=1))
    await batcher.start()
    x = {"x": np.zeros((1, 1), np.float32)}
    await batcher.infer(x, 1)  # measures one batch: about 30 ms
    tasks = []
    for _ in range(8):
        tasks.append(asyncio.create_task(batcher.infer(x, 1)))
        await asyncio.sleep(0)  # each is queued (or refused) before the next arrives
    started = time.monotonic()
    with pytest.raises(LatencyTargetError, match="latency target of 100 ms"):
        await batcher.infer(x, 1)  # over the target: refused without waiting
    assert time.monotonic() - started < 0.005
    results = await asyncio.gather(*tasks, return_exceptions=True)
    refused = [r for r in results if isinstance(r, LatencyTargetError)]
    served = [r for r in results if not isinstance(r, BaseException)]
    assert len(refused) + len(served) == 8
    assert 2 <= len(served) <= 4, "8 x 30 ms is past 100 ms: the queue holds only a few"
    await batcher.stop(1.0)


def test_a_request_that_would_run_at_once_is_never_refused() -> None:
    keeper = TargetKeeper("m", policy("50"), times(b1=80))  # one batch alone misses the target
    keeper.chosen = TargetPlan(1, 0)
    keeper.admit(0, queued=0, idle=True, instances=1)  # runs now: taken, and measured again
    with pytest.raises(LatencyTargetError, match="latency target of 50 ms"):
        keeper.admit(0, queued=1, idle=True, instances=1)
