"""What both batchers do with a batch's answers: the count checked, each handed to its caller
once, and answers handed over a few per turn of the event loop."""

import asyncio
from dataclasses import dataclass, field

import pytest

from batching import ExecutorContractError
from batching.execution import answer_in_turns, checked, settle


@dataclass(frozen=True)
class Outcome:
    responses: list[object]
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    rescheduled: frozenset[int] = field(default_factory=frozenset)


class Named:
    name = "m_0"


def test_an_outcome_with_one_answer_per_request_passes_and_another_count_is_refused() -> None:
    outcome = Outcome([1, 2])
    assert checked(outcome, Named(), 2) is outcome  # type: ignore[arg-type]
    with pytest.raises(ExecutorContractError, match="'m_0' answered 2 of the batch's 3"):
        checked(outcome, Named(), 3)  # type: ignore[arg-type]


async def test_settle_answers_once_and_drops_what_a_cancelled_caller_cannot_take() -> None:
    loop = asyncio.get_running_loop()
    ok, failed, gone = loop.create_future(), loop.create_future(), loop.create_future()
    settle(ok, "result")
    settle(ok, "again")
    settle(failed, ValueError("bad"))
    gone.cancel()
    settle(gone, "late")
    assert ok.result() == "result" and isinstance(failed.exception(), ValueError)
    assert gone.cancelled()


async def test_answers_in_turns_go_a_few_per_turn_of_the_loop() -> None:
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(5)]
    futures[1].cancel()  # a caller gone since its batch ended is skipped, not counted
    answer_in_turns(loop, iter([(f, index) for index, f in enumerate(futures)]), 2)
    assert [f.done() and not f.cancelled() for f in futures] == [True, False, True, False, False]
    await asyncio.sleep(0)
    assert all(f.done() for f in futures)
    assert [f.result() for f in futures if not f.cancelled()] == [0, 2, 3, 4]
