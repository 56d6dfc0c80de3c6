"""Where a sequence batcher's sequences are: slots taken and freed, the backlog in order, and the
work that leaves unexecuted (idle sequences, expired or faulted requests), at explicit times."""

import asyncio

import numpy as np
import pytest

from batching import (
    NO_PARAMETERS,
    BatcherFaultError,
    Control,
    ControlKind,
    DeadlineExceededError,
    SequenceError,
    SequencePolicy,
    SequenceStep,
)
from batching.sequence_slots import OpenSequence, SequenceRequest, SequenceSlots, mark
from tests.batching.test_sequence import Accumulator

IDLE_NS = 1_000


def _policy(slots: int = 2, iterative: bool = False, text_ids: bool = False) -> SequencePolicy:
    dtype = np.object_ if text_ids else np.uint64
    corrid = Control(ControlKind.CORRID, "CORRID", np.array(0, dtype), np.array(0, dtype))
    return SequencePolicy(
        model="acc",
        batching=True,
        slots=slots,
        max_batch_size=slots,
        idle_ns=IDLE_NS,
        controls=(corrid,),
        iterative=iterative,
    )


def _slots(slots: int = 2, instances: int = 1, iterative: bool = False) -> SequenceSlots:
    executors = [Accumulator(f"acc_{index}") for index in range(instances)]
    return SequenceSlots(_policy(slots, iterative), executors)


def _place(slots: SequenceSlots, sequence: OpenSequence) -> tuple[int, int] | None:
    """The instance (by index) and slot holding `sequence`; None: it is not in a slot."""
    for index, lane in enumerate(slots.lanes):
        if sequence in lane.slots:
            assert sequence.lane is lane and lane.slots[sequence.slot] is sequence
            return index, sequence.slot
    return None


def _request(order: int, enqueue_ns: int = 0, expires_ns: int | None = None) -> SequenceRequest:
    return SequenceRequest(
        inputs={"INPUT": np.array([[order]], np.int32)},
        parameters=NO_PARAMETERS,
        start=order == 1,
        end=False,
        enqueue_ns=enqueue_ns,
        order=order,
        future=asyncio.get_running_loop().create_future(),
        expires_ns=expires_ns,
    )


def test_a_new_sequence_takes_the_lowest_free_slot_of_the_least_occupied_instance() -> None:
    slots = _slots(slots=2, instances=2)
    placed = [slots.begin(correlation_id) for correlation_id in (1, 2, 3, 4)]
    assert [_place(slots, sequence) for sequence in placed] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert slots.sequences == dict(zip((1, 2, 3, 4), placed, strict=True))
    assert not slots.backlog and [lane.occupied() for lane in slots.lanes] == [2, 2]


def test_with_every_slot_taken_sequences_wait_and_get_freed_slots_in_order() -> None:
    slots = _slots(slots=2)
    first, second, *waiting = [slots.begin(correlation_id) for correlation_id in range(1, 6)]
    assert list(slots.backlog) == waiting and all(_place(slots, s) is None for s in waiting)
    slots.release(second)
    assert _place(slots, waiting[0]) == (0, 1)  # the oldest takes the freed slot
    assert 2 not in slots.sequences and second.lane is None
    slots.release(first)
    assert _place(slots, waiting[1]) == (0, 0)
    assert list(slots.backlog) == [waiting[2]]
    slots.release(waiting[2])  # one that ends while it waits leaves the backlog
    assert not slots.backlog and sorted(slots.sequences) == [3, 4]
    assert slots.all_sequences() == [waiting[1], waiting[0]]


def test_a_released_sequence_leaves_a_newer_one_of_the_same_id_alone() -> None:
    slots = _slots()
    ended = slots.begin(7)
    del slots.sequences[7]  # its END arrived: the batcher forgets the id at once
    again = slots.begin(7)
    slots.release(ended)
    assert slots.sequences == {7: again} and _place(slots, again) == (0, 1)


def test_a_new_instance_takes_backlogged_sequences_first() -> None:
    slots = _slots(slots=2)
    seated = [slots.begin(correlation_id) for correlation_id in range(1, 6)]
    slots.add(Accumulator("acc_1"))
    assert [_place(slots, sequence) for sequence in seated] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        None,
    ]
    assert list(slots.backlog) == [seated[4]]


async def test_a_retiring_instance_takes_no_sequence_and_keeps_its_freed_slots_empty() -> None:
    slots = _slots(slots=1, instances=2)
    old = slots.begin(1)
    slots.lanes[0].retiring = asyncio.get_running_loop().create_future()
    new = slots.begin(2)
    waiting = slots.begin(3)
    assert _place(slots, new) == (1, 0) and list(slots.backlog) == [waiting]
    slots.release(old)
    assert slots.lanes[0].occupied() == 0 and list(slots.backlog) == [waiting]
    slots.release(new)
    assert _place(slots, waiting) == (1, 0)


async def test_a_sequence_idle_past_the_limit_is_released_for_the_backlog() -> None:
    slots = _slots(slots=1)
    idle, waiting = slots.begin(1), slots.begin(2)
    idle.last_ns, waiting.last_ns = 100, 500
    assert slots.reap(now_ns=100 + IDLE_NS - 1) == 100 + IDLE_NS  # the earlier one is next
    assert _place(slots, idle) == (0, 0)
    assert slots.reap(now_ns=100 + IDLE_NS) == 500 + IDLE_NS
    assert 1 not in slots.sequences and _place(slots, waiting) == (0, 0)
    # Neither one executing nor one with a request waiting is idle, however long ago.
    waiting.running = True
    assert slots.reap(now_ns=10**9) is None
    waiting.running = False
    waiting.requests.append(_request(1))
    assert slots.reap(now_ns=10**9) is None and slots.all_sequences() == [waiting]


async def test_requests_waiting_past_their_deadline_fail_unexecuted() -> None:
    slots = _slots(slots=1)
    running, backlogged = slots.begin(1), slots.begin(2)
    executing = _request(1, expires_ns=100)
    overdue, later, endless = _request(2, 0, 100), _request(3, 0, 500), _request(4)
    running.requests.extend([executing, overdue, later, endless])
    running.running = True
    queued = _request(5, enqueue_ns=20, expires_ns=50)
    backlogged.requests.append(queued)
    assert slots.drop_expired(now_ns=49) == 50  # the earliest deadline still to come
    assert not queued.future.done()
    assert slots.drop_expired(now_ns=100) == 500
    for dropped in (overdue, queued):
        with pytest.raises(DeadlineExceededError, match=r"deadline passed after .* not executed"):
            dropped.future.result()
    assert not executing.future.done()  # it finishes however late
    assert list(running.requests) == [executing, later, endless]
    # The sequences live on: a later request of theirs may still come.
    assert _place(slots, running) == (0, 0) and list(slots.backlog) == [backlogged]
    assert slots.drop_expired(now_ns=500) is None and list(running.requests) == [executing, endless]


async def test_an_iterative_request_that_expires_ends_its_sequence_and_frees_its_slot() -> None:
    slots = _slots(slots=1, iterative=True)
    expiring, waiting = slots.begin(1), slots.begin(2)
    expiring.requests.append(request := _request(1, expires_ns=100))
    waiting.requests.append(_request(2))
    assert slots.drop_expired(now_ns=100) is None
    assert isinstance(request.future.exception(), DeadlineExceededError)
    assert slots.sequences == {2: waiting} and _place(slots, waiting) == (0, 0)


async def test_after_a_fault_every_waiting_request_fails_and_executing_ones_finish() -> None:
    slots = _slots(slots=1)
    running, backlogged = slots.begin(1), slots.begin(2)
    executing, held, queued = _request(1), _request(2), _request(3)
    running.requests.extend([executing, held])
    running.running = True
    backlogged.requests.append(queued)
    slots.fail_held()
    for failed in (held, queued):
        with pytest.raises(BatcherFaultError, match=r"batcher failed .* not executed"):
            failed.future.result()
    assert not executing.future.done() and list(running.requests) == [executing]
    assert not backlogged.requests and sorted(slots.sequences) == [1, 2]


def test_an_iterative_request_gets_a_sequence_of_its_own() -> None:
    slots = _slots(iterative=True)
    slots.begin(2)
    assert slots.own_sequence(None) == SequenceStep(1, start=True)
    assert slots.own_sequence(SequenceStep(0, end=True)) == SequenceStep(3, start=True)  # 2 runs
    assert slots.own_sequence(SequenceStep(9)) == SequenceStep(9, start=True)
    with pytest.raises(SequenceError, match=r"sequence 2 .* still running"):
        slots.own_sequence(SequenceStep(2))
    text = SequenceSlots(_policy(iterative=True, text_ids=True), [Accumulator()])
    assert text.own_sequence(SequenceStep("")) == SequenceStep("1", start=True)
    assert text.own_sequence(SequenceStep("mine")) == SequenceStep("mine", start=True)


async def test_a_slot_is_marked_by_its_ready_request() -> None:
    sequence = OpenSequence(5)
    assert mark(None) is None and mark(sequence) is None and sequence.ready() is None
    first, second = _request(4, enqueue_ns=30), _request(6, enqueue_ns=40)
    sequence.requests.extend([first, second])
    assert sequence.ready() is first and mark(sequence) == (30, 4)
    sequence.running = True  # one request at a time: the next waits for the first to finish
    assert sequence.ready() is None and mark(sequence) is None
