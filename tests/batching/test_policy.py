"""Triton's batch selection, one rule per test, with time passed in explicitly."""

import itertools
from dataclasses import replace

import pytest

from batching import BatchPolicy, Candidate, Decision, PolicyError, QueuePolicy, next_batch
from batching.policy import grows_quietly
from server.core.repository import parse_config

MS = 1_000_000  # nanoseconds


def policy(text: str, max_batch_size: int = 8) -> BatchPolicy:
    return BatchPolicy.from_config(
        parse_config(f'name: "m" max_batch_size: {max_batch_size} {text}', "inline")
    )


def queued(*sizes: int, at_ns: int = 0, shape: tuple[object, ...] = ()) -> list[Candidate]:
    return [Candidate(size, at_ns, shape) for size in sizes]


def test_without_dynamic_batching_one_request_per_execution() -> None:
    assert next_batch(queued(1, 1, 1), policy(""), 0) == Decision(1, size=1)


def test_non_batching_model_never_batches() -> None:
    assert next_batch(queued(1, 1), policy("dynamic_batching {}", 0), 0) == Decision(1, size=1)


def test_empty_queue_means_nothing_to_do() -> None:
    assert next_batch([], policy("dynamic_batching {}"), 0) == Decision(0)


def test_default_settings_send_as_much_as_possible_without_waiting() -> None:
    # No preferred sizes and no delay: everything pending, up to max_batch_size, at once.
    assert next_batch(queued(1, 1, 1), policy("dynamic_batching {}"), 0) == Decision(3, size=3)


def test_max_batch_size_cuts_the_batch() -> None:
    assert next_batch(queued(3, 3, 3), policy("dynamic_batching {}"), 0) == Decision(2, size=6)


def test_a_request_counts_its_own_batch_dimension() -> None:
    chosen = policy("dynamic_batching { preferred_batch_size: [4] }")
    assert next_batch(queued(2, 2, 2), chosen, 0) == Decision(2, size=4)


def test_largest_reachable_preferred_size_is_sent_before_the_delay() -> None:
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 1000 }"
    )
    assert next_batch(queued(1, 1, 1, 1, 1), chosen, 0) == Decision(4, size=4)


def test_unreachable_preferred_size_waits_for_the_oldest_request_delay() -> None:
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 2000 }"
    )
    assert next_batch(queued(1, 1, at_ns=10 * MS), chosen, 11 * MS) == Decision(0, 12 * MS, 2)


def test_after_the_delay_whatever_is_pending_is_sent() -> None:
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 2000 }"
    )
    # Sent because it waited out the delay (the batcher answers such a batch in turns).
    assert next_batch(queued(1, 1, at_ns=10 * MS), chosen, 12 * MS) == Decision(
        2, size=2, waited=True
    )
    # At the largest preferred size it goes at once, without waiting.
    assert next_batch(queued(1, 3, at_ns=10 * MS), chosen, 12 * MS) == Decision(2, size=4)


def test_pending_at_the_largest_preferred_size_goes_at_once() -> None:
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [2, 3] max_queue_delay_microseconds: 2000 }"
    )
    # 1+3 = 4 passes every preferred size without hitting one: send all that is pending.
    assert next_batch(queued(1, 3), chosen, 0) == Decision(2, size=4)


def test_a_shape_mismatch_cuts_the_batch_without_reordering() -> None:
    chosen = policy("dynamic_batching { max_queue_delay_microseconds: 5000 }")
    candidates = [
        Candidate(1, 0, ((3,),)),
        Candidate(1, 0, ((3,),)),
        Candidate(1, 0, ((5,),)),
        Candidate(1, 0, ((3,),)),
    ]
    assert next_batch(candidates, chosen, 0) == Decision(2, size=2)


def test_preferred_sizes_default_to_max_batch_size() -> None:
    assert policy("dynamic_batching {}").preferred_batch_sizes == (8,)


ADAPTIVE = 'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "true" } }'


def test_adaptive_delay_sends_a_batch_once_it_reaches_what_waits_reached() -> None:
    chosen = policy(
        f"dynamic_batching {{ preferred_batch_size: [8] max_queue_delay_microseconds: 2000 }} "
        f"{ADAPTIVE}"
    )
    # A lone client: waiting out the delay reached one request, so one is sent at once.
    assert next_batch(queued(1), chosen, 0, reach=1) == Decision(1, size=1)
    # Four clients in step: waits reached four; three wait on, the fourth completes the batch.
    assert next_batch(queued(1, 1, 1), chosen, 0, reach=4) == Decision(0, 2 * MS, size=3)
    assert next_batch(queued(1, 1, 1, 1), chosen, 0, reach=4) == Decision(4, size=4)
    # Requests of several rows: the batch is sent once its rows reach it.
    assert next_batch(queued(2, 2), chosen, 0, reach=5) == Decision(0, 2 * MS, size=4)
    assert next_batch(queued(2, 3), chosen, 0, reach=5) == Decision(2, size=5)
    # Unknown reach (a probe): wait as Triton would, which measures it.
    assert next_batch(queued(1), chosen, 0) == Decision(0, 2 * MS, size=1)


def test_adaptive_delay_holds_a_smaller_preferred_size_for_the_largest_where_waits_reach_it() -> (
    None
):
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 1000 }"
    )
    three = queued(1, 1, 1, at_ns=0)
    # Waits reached the largest preferred size lately, or a probe finds out: wait on for it.
    assert next_batch(three, chosen, MS // 10, reach=4) == Decision(0, MS, size=3)
    assert next_batch(three, chosen, MS // 10, reach=None) == Decision(0, MS, size=3)
    assert next_batch(queued(1, 1, 1, 1), chosen, MS // 10, reach=4) == Decision(4, size=4)
    # Waits reached less: Triton's rule, the largest preferred size reached goes at once.
    assert next_batch(three, chosen, MS // 10, reach=3) == Decision(2, size=2)
    # The delay over: everything pending goes, as under Triton.
    assert next_batch(three, chosen, MS, reach=4) == Decision(3, size=3, waited=True)


def test_without_the_adaptive_delay_a_smaller_preferred_size_goes_at_once() -> None:
    off = policy(
        "dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 1000 } "
        + _parameters(convoy_adaptive_queue_delay="false")
    )
    assert next_batch(queued(1, 1, 1), off, 0, reach=4) == Decision(2, size=2)
    assert not grows_quietly(off, 1, 1, reach=4)
    # Without a delay there is nothing to hold for, whatever the reach.
    no_delay = replace(
        policy("dynamic_batching { preferred_batch_size: [2, 4] }"), adaptive_delay=True
    )
    assert next_batch(queued(1, 1, 1), no_delay, 0) == Decision(2, size=2)


def test_the_adaptive_delay_is_on_by_default_and_off_when_asked_or_without_a_delay() -> None:
    assert policy("dynamic_batching { max_queue_delay_microseconds: 2000 }").adaptive_delay
    assert not policy("dynamic_batching { }").adaptive_delay  # nothing to end early
    chosen = policy(
        "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 2000 } "
        'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "false" } }'
    )
    assert not chosen.adaptive_delay
    # Off, the reach is ignored: Triton's wait.
    assert next_batch(queued(1), chosen, 0, reach=1) == Decision(0, 2 * MS, size=1)
    assert grows_quietly(chosen, 1, 1, reach=2)


def test_an_arrival_that_completes_the_reach_ends_the_quiet_wait() -> None:
    chosen = policy(f"dynamic_batching {{ max_queue_delay_microseconds: 2000 }} {ADAPTIVE}")
    for pending in range(1, 7):
        for rows in range(1, 8 - pending):
            for reach in (None, 2, 3, 6):
                waiting = queued(pending)
                if next_batch(waiting, chosen, 0, reach).count:
                    continue
                decision = next_batch([*waiting, *queued(rows)], chosen, 0, reach)
                assert grows_quietly(chosen, pending, rows, reach) == (decision.count == 0)


def test_priority_levels_and_queue_policies() -> None:
    chosen = policy(
        """dynamic_batching {
             priority_levels: 3 default_priority_level: 2
             default_queue_policy { max_queue_size: 5 }
             priority_queue_policy { key: 1 value: { timeout_action: DELAY
               default_timeout_microseconds: 100 allow_timeout_override: true } }
           }"""
    )
    assert [chosen.level_of(p) for p in (0, 1, 3, 4)] == [2, 1, 3, 2]
    assert chosen.queue_policies[1] == QueuePolicy(max_queue_size=5)
    assert chosen.queue_policies[0].default_timeout_ns == 100_000


def test_timeout_override_may_only_shorten() -> None:
    fixed = QueuePolicy(default_timeout_ns=100, allow_timeout_override=False)
    assert fixed.deadline_ns(1000, 10) == 1100
    shortening = QueuePolicy(default_timeout_ns=100, allow_timeout_override=True)
    assert shortening.deadline_ns(1000, 10) == 1010
    assert shortening.deadline_ns(1000, 500) == 1100
    unbounded = QueuePolicy(allow_timeout_override=True)
    assert unbounded.deadline_ns(1000, 0) is None
    assert unbounded.deadline_ns(1000, 20) == 1020


def test_default_priority_level_must_be_a_level() -> None:
    with pytest.raises(PolicyError, match="default_priority_level"):
        policy("dynamic_batching { priority_levels: 2 default_priority_level: 3 }")


def test_variable_dims_and_optional_inputs_must_match_within_a_batch() -> None:
    chosen = policy(
        """input [ { name: "fixed" data_type: TYPE_FP32 dims: [4] },
                   { name: "var" data_type: TYPE_FP32 dims: [-1] },
                   { name: "ragged" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true },
                   { name: "opt" data_type: TYPE_FP32 dims: [2] optional: true } ]
           dynamic_batching {}"""
    )
    assert chosen.equal_shape_inputs == ("var", "opt")


def _parameters(**values: str) -> str:
    return " ".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in values.items()
    )


def test_fair_share_and_its_weights_are_read_from_the_config() -> None:
    fair = policy("dynamic_batching {} " + _parameters(convoy_fair_share="true"))
    assert fair.fair_share and fair.share_weights == ()
    weighted = policy(
        "dynamic_batching {} "
        + _parameters(convoy_fair_share="TRUE", convoy_fair_share_weights="gold=4, batch-jobs=1")
    )
    assert weighted.share_weights == (("gold", 4), ("batch-jobs", 1))
    assert not policy("dynamic_batching {}").fair_share


@pytest.mark.parametrize("weights", ["gold", "gold=0", "=3", "gold=x", "gold=1.5"])
def test_a_bad_fair_share_weight_is_refused(weights: str) -> None:
    with pytest.raises(PolicyError, match="convoy_fair_share_weights takes CLASS=WEIGHT"):
        policy("dynamic_batching {} " + _parameters(convoy_fair_share_weights=weights))


@pytest.mark.parametrize(
    "preferred", ["", "preferred_batch_size: [4, 6]", "preferred_batch_size: 3"]
)
def test_an_arrival_grows_a_waiting_batch_quietly_exactly_when_the_choice_stays_a_wait(
    preferred: str,
) -> None:
    """The batcher's loop sleeps through an arrival that `grows_quietly` allows: for every
    waiting batch and every arrival that fits the model, that is when `next_batch` still waits."""
    chosen = policy(f"dynamic_batching {{ {preferred} max_queue_delay_microseconds: 1000 }}")
    for first, second, rows, reach in itertools.product(
        range(1, 9), range(1, 9), range(1, 9), (None, 3, 5, 6, 8)
    ):
        waiting = queued(first, second)
        if next_batch(waiting, chosen, 0, reach).count:
            continue  # the loop would not be waiting for this batch
        pending = first + second
        decision = next_batch([*waiting, *queued(rows)], chosen, 0, reach)
        assert grows_quietly(chosen, pending, rows, reach) == (decision.count == 0), (
            pending,
            rows,
            reach,
        )
