"""The rate limiter: counts, grants by weighted executions, no starvation; then the limiter with
real batchers: two models sharing one resource never run at once, priorities shift the share."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from google.protobuf import text_format

from batching import Batcher, BatchPolicy, Parameters, PolicyError, TensorMap
from batching.limiter import RateLimiter, ResourceWait
from batching.rate_limit import (
    GLOBAL,
    Contender,
    ExplicitCount,
    Needs,
    grants,
    parse_explicit,
    resource_counts,
    too_large,
)
from proto import model_config_pb2 as mc
from server.core.repository import parse_config


def _group(text: str) -> mc.ModelInstanceGroup:
    return text_format.Parse(text, mc.ModelInstanceGroup())


def test_needs_from_an_instance_group() -> None:
    group = _group(
        "rate_limiter { resources [ { name: 'R1' count: 4 }, { name: 'G' global: true count: 2 } ]"
        " priority: 2 }"
    )
    assert Needs.from_group(group, 0) == Needs({("R1", 0): 4, ("G", GLOBAL): 2}, 2)
    assert Needs.from_group(_group("count: 1"), -1) == Needs({}, 1)  # priority 0 counts as 1


def test_default_counts_are_the_most_any_instance_asks_and_explicit_ones_win() -> None:
    # Triton's example: A [R1: 4, R2: 4], B [R2: 5, R3: 10, R4: 5], C [R1: 1, R3: 7, R4: 2].
    a = Needs({("R1", 0): 4, ("R2", 0): 4})
    b = Needs({("R2", 0): 5, ("R3", 0): 10, ("R4", 0): 5})
    c = Needs({("R1", 0): 1, ("R3", 0): 7, ("R4", 0): 2})
    assert resource_counts([a, b, c], ()) == {
        ("R1", 0): 4,
        ("R2", 0): 5,
        ("R3", 0): 10,
        ("R4", 0): 5,
    }
    # --rate-limit-resource R1:10 R2:5:0 R2:8:1 R3:2, on two devices, R3 global.
    explicit = [parse_explicit(t) for t in ("R1:10", "R2:5:0", "R2:8:1", "R3:2")]
    on_1 = Needs({("R1", 1): 1, ("R2", 1): 1, ("R3", GLOBAL): 1})
    counts = resource_counts([a, on_1], explicit)
    assert counts == {("R1", 0): 10, ("R2", 0): 5, ("R1", 1): 10, ("R2", 1): 8, ("R3", GLOBAL): 2}


def test_an_explicit_count_below_a_need_names_both_numbers() -> None:
    explicit = [ExplicitCount("R", 2)]
    assert too_large(Needs({("R", 0): 2}), explicit) is None
    reason = too_large(Needs({("R", 0): 3}), explicit)
    assert (
        reason == "resource 'R' (device 0): the instance needs 3, but --rate-limit-resource gives 2"
    )
    with pytest.raises(PolicyError, match="expected <name>:<count>"):
        parse_explicit("R:two")


def _contender(
    ident: int, executions: int, priority: int = 1, need: int = 1, since: int = 0
) -> Contender:
    return Contender(ident, Needs({("R", 0): need}, priority), executions, since)


def test_fewest_weighted_executions_first_then_the_longest_waiting() -> None:
    free = {("R", 0): 1}
    assert grants([_contender(1, 3), _contender(2, 2)], free) == [2]
    # priority 2: two executions weigh as four of priority 1
    assert grants([_contender(1, 3), _contender(2, 2, priority=2)], free) == [1]
    assert grants([_contender(1, 2, since=20), _contender(2, 2, since=10)], free) == [2]
    assert grants([_contender(1, 0), _contender(2, 0)], {("R", 0): 2}) == [1, 2]


def test_a_large_need_holds_back_smaller_ones_ranked_below_it() -> None:
    free = {("R", 0): 1}
    big, small = _contender(1, 0, need=2), _contender(2, 5)
    assert grants([big, small], free) == []  # the one free copy waits for a second one
    assert grants([big, small], {("R", 0): 2}) == [1]


def test_priorities_share_executions_in_proportion_without_starving() -> None:
    executions = {1: 0, 2: 0, 3: 0}
    priorities = {1: 1, 2: 2, 3: 4}
    for step in range(700):
        contenders = [
            Contender(i, Needs({("R", 0): 1}, priorities[i]), executions[i], step)
            for i in executions
        ]
        (chosen,) = grants(contenders, {("R", 0): 1})
        executions[chosen] += 1
    assert executions == {1: 400, 2: 200, 3: 100}


@dataclass(frozen=True)
class _Result:
    responses: list[dict[str, np.ndarray] | Exception]
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    rescheduled: frozenset[int] = frozenset()


class Recorder:
    """An instance that records its execution intervals on a shared timeline."""

    def __init__(self, name: str, timeline: list[tuple[str, str]], delay_s: float = 0.01) -> None:
        self.name, self.timeline, self.delay_s = name, timeline, delay_s

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> _Result:
        self.timeline.append(("start", self.name))
        await asyncio.sleep(self.delay_s)
        self.timeline.append(("end", self.name))
        return _Result([{"y": r["x"]} for r in requests])


POLICY = BatchPolicy.from_config(parse_config('name: "m" max_batch_size: 8', "inline"))


async def _batchers(
    limiter: RateLimiter, timeline: list[tuple[str, str]], needs: dict[str, Needs]
) -> dict[str, Batcher]:
    batchers = {}
    for name, need in needs.items():
        executor = Recorder(name, timeline)
        limiter.register(executor, need, ResourceWait())
        batchers[name] = Batcher(name, [executor], POLICY, gate=limiter)
        await batchers[name].start()
    return batchers


async def _load(batcher: Batcher, count: int) -> None:
    x = {"x": np.zeros((1, 1), np.float32)}
    await asyncio.gather(*(batcher.infer(x, 1) for _ in range(count)))


async def test_two_models_sharing_one_copy_never_run_at_once_and_a_third_runs_beside() -> None:
    limiter, timeline = RateLimiter(), []
    shared = Needs({("R", -1): 1})
    batchers = await _batchers(
        limiter, timeline, {"a": shared, "b": shared, "own": Needs({("S", -1): 1})}
    )
    await asyncio.gather(*(_load(batcher, 6) for batcher in batchers.values()))
    running: set[str] = set()
    overlapped_own = False
    for event, name in timeline:
        if event == "start":
            assert not ({"a", "b"} & running and name in {"a", "b"}), timeline
            overlapped_own |= bool(running) and (name == "own" or "own" in running)
            running.add(name)
        else:
            running.discard(name)
    assert overlapped_own  # the model with its own resource ran beside the others
    for batcher in batchers.values():
        await batcher.stop(1.0)


async def test_priorities_shift_the_share_under_contention() -> None:
    limiter, timeline = RateLimiter(), []
    batchers = await _batchers(
        limiter,
        timeline,
        {"first": Needs({("R", -1): 1}, 1), "second": Needs({("R", -1): 1}, 3)},
    )
    tasks = [asyncio.create_task(_load(b, 40)) for b in batchers.values()]
    await asyncio.sleep(0.3)  # both saturated: count who ran meanwhile
    starts = [name for event, name in timeline if event == "start"]
    first, second = starts.count("first"), starts.count("second")
    assert second > 0 and 2 <= first / second <= 4, (first, second)
    await asyncio.gather(*tasks)
    for batcher in batchers.values():
        await batcher.stop(1.0)
