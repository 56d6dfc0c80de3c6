"""The adaptive delay's reach: the batch size that waiting out the whole delay reached lately.

A batch sent at the reach hides how far it would have grown, so only a full wait (a probe)
measures it: `Reach.known` answers None when a probe is due, the batcher then forms a batch as
Triton's would, and reports the size it reached with `Reach.probed`. Pure bookkeeping over the
clock its caller passes in; `policy.next_batch` decides what the reach does to a batch.

A probe can also show that no reach holds: its batch was still growing when the delay ended
(`still_growing`) while the event loop was busy reading requests (`LOOP_BUSY`). The clients are
then not all in the batch; the loop is what paces their arrivals, and a batch sent before the
delay ends is sent short of the requests the loop has yet to read: the clients split into more,
smaller batches, each costing the loop a batch (mlp, 2 ms, over unary gRPC, 2 cores, 32 clients:
batches of 12.6-12.9 at the reach against 14.1-15.7 waiting out the delay). The
reach is then *delay-bound*: every batch waits out the delay, as under Triton, and is itself a
probe, until `LEAVE_AFTER` in a row stop growing before their end (whatever the loop's load:
another model's load may keep it busy). Their newest requests came then at least an eighth of
the delay before the end, so that waiting it out cost no more than that eighth.
"""

from __future__ import annotations

# A probe is due when the reach is this old, or 20 delays old where that is longer (the base
# interval; longer while probes confirm the reach): probes then hold batches at most 5% of the
# time.
PROBE_EVERY_NS = 100_000_000
PROBE_EVERY_DELAYS = 20
PROBE_INTERVALS_MOST = 8  # the longest wait between two probes, in base intervals
PROBES_REMEMBERED = 10  # a probe after this many base intervals starts the reach anew
# A probe whose newest request came in the last 1/8 of the delay was still growing at its end
# (mlp, 2 ms, 2 cores: 26-101 us before the end at 32 clients, 0.7-1.8 ms at 8 and under
# perf_analyzer's Poisson load)
GROWING_PARTS = 8
# and the event loop's thread busy this share of the probe's wait (its CPU time over the wait's
# wall time) was reading requests, not waiting for them: 0.88-1.0 at 32 clients, 0.05-0.41 at 8
# and under Poisson load
LOOP_BUSY = 0.75
# Probes in a row that stop growing before their end, before a delay-bound reach is known again:
# with every batch a probe, a load of 32 clients has a straggler's batch now and then (a few
# requests, while the loop answers the batch before), and a reach taken from it would send the
# next 100 ms of batches at a few requests each
LEAVE_AFTER = 4


def next_reach(previous: int | None, reached: int) -> int:
    """The reach after a probe reached `reached` rows: up at once (more clients came), down
    halfway (one probe under random arrivals is noisy), in whole rows, so that it comes down to
    the probe's own size, 1 for a lone client, in a few probes."""
    if previous is None or reached >= previous:
        return reached
    return (previous + reached) // 2


def still_growing(delay_ns: int, ended_ns: int, newest_ns: int) -> bool:
    """Whether a probe that waited out `delay_ns` and ended at `ended_ns` was still growing: its
    newest request was queued (at `newest_ns`) in the last `GROWING_PARTS`-th of the delay."""
    return (ended_ns - newest_ns) * GROWING_PARTS < delay_ns


def delay_bound(growing: bool, busy: float | None) -> bool:
    """Whether a probe shows that no reach holds: it was `growing` at its end while the loop's
    thread was busy `LOOP_BUSY` of its wait (`busy`; None: not measured, the batch never
    waited). A batch still growing on a loop with time to spare, under a light random load, is
    chance."""
    return growing and busy is not None and busy >= LOOP_BUSY


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
        self._bound = False  # delay-bound: every batch waits out the delay and probes
        self._all_in = 0  # while delay-bound: probes in a row that stopped growing
        self._probed_ns = 0  # when the last probe ended
        self._base_ns = max(PROBE_EVERY_NS, PROBE_EVERY_DELAYS * max_queue_delay_ns)
        self._every_ns = self._base_ns

    @property
    def bound(self) -> bool:
        """Whether the reach is delay-bound (every batch a probe that waits out the delay)."""
        return self._bound

    def known(self, now_ns: int) -> int | None:
        """The reach at `now_ns`; None when a probe is due (or none was ever made, or the reach
        is delay-bound)."""
        if now_ns - self._probed_ns > self._every_ns:
            return None
        return self._size

    def probed(self, size: int, now_ns: int, *, growing: bool, busy: float | None) -> None:
        """A probe ended at `now_ns` with a batch of `size` rows, `growing` at its end (see
        `still_growing`), with the loop's thread busy `busy` of its wait (None: not measured).
        A probe long after the last one (the load may have gone and come back), or the first
        after the reach was delay-bound, starts the reach anew."""
        if self._bound:
            self._all_in = 0 if growing else self._all_in + 1
            self._bound = self._all_in < LEAVE_AFTER
        else:
            self._bound = delay_bound(growing, busy)
        if self._bound:
            self._size = None  # known() answers None: the next batch probes again
            self._probed_ns = now_ns
            return
        self._all_in = 0
        remembered = now_ns - self._probed_ns <= PROBES_REMEMBERED * self._base_ns
        previous = self._size if remembered else None
        self._size = next_reach(previous, size)
        self._probed_ns = now_ns
        self._every_ns = next_probe_interval(
            self._every_ns, self._base_ns, confirmed=self._size == previous
        )
