"""The per-level queues: order, bounds, timeouts (REJECT and DELAY), discards."""

from dataclasses import replace

import pytest

from batching import BatchPolicy, Candidate, Queued, QueueFullError, RequestQueue, split_expired
from server.core.repository import parse_config


def make_policy(batching: str) -> BatchPolicy:
    config = parse_config(f'name: "m" max_batch_size: 8 dynamic_batching {{ {batching} }}', "x")
    return BatchPolicy.from_config(config)


def make_queue(batching: str) -> RequestQueue:
    return RequestQueue(make_policy(batching))


def request(tag: int, level: int = 1, deadline_ns: int | None = None) -> Queued:
    return Queued({}, {}, Candidate(1, tag, ()), level, deadline_ns, future=tag)


def tags(queue: RequestQueue) -> list[int]:
    return [r.candidate.enqueue_ns for r in queue]


def test_higher_priority_levels_are_served_first_fifo_within_a_level() -> None:
    queue = make_queue("priority_levels: 2 default_priority_level: 2")
    for tag, level in [(1, 2), (2, 1), (3, 2), (4, 1)]:
        queue.push(request(tag, level))
    assert tags(queue) == [2, 4, 1, 3]
    assert [r.candidate.enqueue_ns for r in queue.take(3)] == [2, 4, 1]
    assert tags(queue) == [3]
    assert len(queue) == 1


def test_max_queue_size_refuses_at_once() -> None:
    queue = make_queue("default_queue_policy { max_queue_size: 2 }")
    queue.push(request(1))
    queue.push(request(2))
    with pytest.raises(QueueFullError, match="Exceeds maximum queue size"):
        queue.push(request(3))
    queue.take(1)
    queue.push(request(3))  # room again once one has left


def test_reject_removes_expired_requests() -> None:
    queue = make_queue("default_queue_policy { default_timeout_microseconds: 1 }")
    queue.push(request(1, deadline_ns=100))
    queue.push(request(2, deadline_ns=300))
    assert queue.next_deadline_ns() == 100
    assert [r.candidate.enqueue_ns for r in queue.expire(200)] == [1]
    assert tags(queue) == [2]
    assert queue.next_deadline_ns() == 300


def test_delay_moves_expired_requests_behind_their_level() -> None:
    queue = make_queue("default_queue_policy { timeout_action: DELAY }")
    queue.push(request(1, deadline_ns=100))
    queue.push(request(2))
    queue.push(request(3))
    assert queue.expire(200) == []
    assert tags(queue) == [2, 3, 1]
    assert [r.candidate.enqueue_ns for r in queue.take(3)] == [2, 3, 1]
    assert len(queue) == 0


def test_discarded_requests_are_skipped_and_free_their_place() -> None:
    queue = make_queue("default_queue_policy { max_queue_size: 2 }")
    first, second = request(1), request(2)
    queue.push(first)
    queue.push(second)
    queue.discard(first)
    assert tags(queue) == [2]
    queue.push(request(3))
    assert [r.candidate.enqueue_ns for r in queue.take(5)] == [2, 3]


def test_requests_leave_at_their_own_deadline_and_the_nearest_one_wakes_the_batcher() -> None:
    queue = make_queue("default_queue_policy { default_timeout_microseconds: 1 }")
    first = request(1, deadline_ns=500)
    first.expires_ns = 200
    second = request(2)
    second.expires_ns = 400
    queue.push(first)
    queue.push(second)
    queue.push(request(3))
    assert queue.next_deadline_ns() == 200
    assert queue.drop_expired(199) == []
    assert queue.drop_expired(200) == [first]
    assert tags(queue) == [2, 3]
    assert queue.next_deadline_ns() == 400
    queue.discard(second)  # a discarded request's deadline no longer wakes anyone
    assert queue.next_deadline_ns() is None
    assert queue.drop_expired(1000) == []


def test_split_expired_keeps_order_and_drops_only_the_past_ones() -> None:
    ahead, late, none = request(1), request(2), request(3)
    ahead.expires_ns, late.expires_ns = 300, 100
    assert split_expired([ahead, late, none], 100) == ([ahead, none], [late])
    assert split_expired([ahead, late, none], 99) == ([ahead, late, none], [])


def test_a_fair_share_level_serves_classes_in_turn_after_higher_levels() -> None:
    policy = make_policy("priority_levels: 2 default_priority_level: 2")
    fair = RequestQueue(replace(policy, fair_share=True))
    for tag, share, level in [(1, "a", 2), (2, "a", 2), (3, "a", 2), (4, "b", 2), (5, "", 1)]:
        item = request(tag, level)
        item.share = share
        fair.push(item)
    assert tags(fair) == [5, 1, 4, 2, 3]
    assert [r.candidate.enqueue_ns for r in fair.take(3)] == [5, 1, 4]
    assert tags(fair) == [2, 3]
