"""The turns refused requests are told to come back at (`batching.turns`): a pure rule over
explicit times."""

import itertools

from batching.turns import LEAST_RETRY_NS, TURNS_AHEAD_NS, Turns

MS = 1_000_000


def test_requests_refused_together_are_told_turns_a_share_apart() -> None:
    turns = Turns()
    # Each would fit 20 ms from now; a request's share of the machine is 5 ms.
    told = [turns.tell(0, 20 * MS, 5 * MS) for _ in range(3)]
    assert told == [20 * MS, 25 * MS, 30 * MS]
    # Once the line has passed, a refusal is told its own time again.
    assert turns.tell(100 * MS, 110 * MS, 5 * MS) == 10 * MS


def test_a_hint_is_never_under_a_millisecond_nor_a_turn_past_the_bound() -> None:
    turns = Turns()
    assert turns.tell(0, 0, 0) == LEAST_RETRY_NS  # fits now: come back in a millisecond
    # Clients that ignore their turns push the line no further than the bound past their own
    # time; past it the line starts again there, so later refusals are still told turns apart.
    told = [turns.tell(0, 10 * MS, 20 * MS) for _ in range(120)]
    assert max(told) == 10 * MS + TURNS_AHEAD_NS == told[50]
    assert told[51:54] == [10 * MS, 30 * MS, 50 * MS]
    assert all(a != b for a, b in itertools.pairwise(told))
