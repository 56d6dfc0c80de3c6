"""`Turns`: when a refused request is told to come back (the retry hint of its refusal), for
the refusals that can tell: a model over its latency target, a full queue.

A request refused now would fit at some later time (the batcher predicts it); requests refused
together are told turns one request's share of the machine apart, so that their clients do not
all come back at once. A turn lies at most `TURNS_AHEAD_NS` past the request's own time: past
that, the line starts again from the request's own time. Clients that resend at once, ignoring
their turns, would otherwise push the line out without bound, and a line held at the bound would
tell every later refusal the same turn.
Event-loop owned, like the batcher that keeps it.
"""

from __future__ import annotations

LEAST_RETRY_NS = 1_000_000  # a hint is never under a millisecond
TURNS_AHEAD_NS = 1_000_000_000


class Turns:
    """The line of turns told so far."""

    def __init__(self) -> None:
        self._next_ns = 0  # the earliest turn the next refusal may be told

    def tell(self, now_ns: int, fits_ns: int, share_ns: int) -> int:
        """The hint (ns from `now_ns`) for a request refused at `now_ns` that would fit at
        `fits_ns`; the next refusal is told a turn at least `share_ns` after this one's, or
        its own time where that turn would lie past the bound."""
        turn_ns = max(fits_ns, self._next_ns)
        if turn_ns > fits_ns + TURNS_AHEAD_NS:  # past the bound: the line starts again
            turn_ns = fits_ns
        self._next_ns = turn_ns + share_ns
        return max(turn_ns - now_ns, LEAST_RETRY_NS)
