"""What the dynamic and the sequence batcher share once a batch has run on an instance: its answers
checked against the batch, and handed over to the callers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from batching.errors import ExecutorContractError
from batching.messages import ExecutionRecord, Executor, Outcome

Observer = Callable[[ExecutionRecord], None]  # told of every batch run, failed ones too

Answer = Any  # a request's RequestResult, or the exception it fails with
Handover = tuple[asyncio.Future[Any], Answer]


def checked(outcome: Outcome, executor: Executor, size: int) -> Outcome:
    """`outcome` of `executor` running a batch of `size` requests; ExecutorContractError when it
    answers another number of requests (each answer goes to its request by position). A check,
    not a wrapper coroutine around the call: one frame fewer on every batch."""
    if len(outcome.responses) != size:
        raise ExecutorContractError(
            f"instance '{executor.name}' answered {len(outcome.responses)} of the batch's "
            f"{size} requests"
        )
    return outcome


def settle(future: asyncio.Future[Any], answer: Answer) -> None:
    """A request's answer (its result, or the exception it fails with) to its caller; dropped
    when the caller has gone away (its future is cancelled) or was answered already."""
    if future.done():
        return
    if isinstance(answer, BaseException):
        future.set_exception(answer)
    else:
        future.set_result(answer)


def answer_in_turns(
    loop: asyncio.AbstractEventLoop, answers: Iterator[Handover], per_turn: int
) -> None:
    """Hand over `per_turn` answers now and as many in each of the loop's next turns: the
    requests that arrive meanwhile are read between them. Where the front end's write is
    immediate (HTTP), a client answered early sends its next request while the batch's other
    answers are still going out, and that request starts the next batch's delay then, not after
    all of them."""
    given = 0
    for future, answer in answers:
        if not future.done():  # a caller cancelled since its batch ended
            settle(future, answer)
            given += 1
            if given == per_turn:
                loop.call_soon(answer_in_turns, loop, answers, per_turn)
                return
