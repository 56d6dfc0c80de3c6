"""The adaptive delay's reach: the batch size that waiting out the whole delay reached lately.

A batch sent at the reach hides how far it would have grown, so only a full wait (a probe)
measures it: `Reach.known` answers None when a probe is due, the batcher then forms a batch as
Triton's would, and reports the size it reached with `Reach.probed`. Pure bookkeeping over the
clock its caller passes in; `policy.next_batch` decides what the reach does to a batch.
"""

from __future__ import annotations

# A probe is due when the reach is this old, or 20 delays old where that is longer (the base
# interval; longer while probes confirm the reach): probes then hold batches at most 5% of the
# time.
PROBE_EVERY_NS = 100_000_000
PROBE_EVERY_DELAYS = 20
PROBE_INTERVALS_MOST = 8  # the longest wait between two probes, in base intervals
PROBES_REMEMBERED = 10  # a probe after this many base intervals starts the reach anew


def next_reach(previous: int | None, reached: int) -> int:
    """The reach after a probe reached `reached` rows: up at once (more clients came), down
    halfway (one probe under random arrivals is noisy), in whole rows, so that it comes down to
    the probe's own size, 1 for a lone client, in a few probes."""
    if previous is None or reached >= previous:
        return reached
    return (previous + reached) // 2


def next_probe_interval(interval_ns: int, base_ns: int, confirmed: bool) -> int:
    """How long until the next probe: twice as long as last time (at most
    `PROBE_INTERVALS_MOST` base intervals) after a probe that found the same reach, so that a
    steady load pays fewer probes; the base interval after one that changed it."""
    if not confirmed:
        return base_ns
    return min(2 * interval_ns, PROBE_INTERVALS_MOST * base_ns)


class Reach:
    """One batcher's reach and its probes' schedule, for a model whose delay is
    `max_queue_delay_ns`."""

    def __init__(self, max_queue_delay_ns: int) -> None:
        self._size: int | None = None
        self._probed_ns = 0  # when the last probe ended
        self._base_ns = max(PROBE_EVERY_NS, PROBE_EVERY_DELAYS * max_queue_delay_ns)
        self._every_ns = self._base_ns

    def known(self, now_ns: int) -> int | None:
        """The reach at `now_ns`; None when a probe is due (or none was ever made)."""
        if now_ns - self._probed_ns > self._every_ns:
            return None
        return self._size

    def probed(self, size: int, now_ns: int) -> None:
        """A probe ended at `now_ns` with a batch of `size` rows. A probe long after the last
        one (the load may have gone and come back) starts the reach anew."""
        remembered = now_ns - self._probed_ns <= PROBES_REMEMBERED * self._base_ns
        previous = self._size if remembered else None
        self._size = next_reach(previous, size)
        self._probed_ns = now_ns
        self._every_ns = next_probe_interval(
            self._every_ns, self._base_ns, confirmed=self._size == previous
        )
