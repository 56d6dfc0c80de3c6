"""When an instance's batch runs inline on the event loop instead of on its thread: a pure rule
over the batch times measured for each batch size.

Handing a batch to the instance's thread costs the event loop a queue put, a wake-up of the
thread and a `call_soon_threadsafe` back (25-30 us of CPU on the 2-core machine), and the thread
pays a wake-up and cold caches of its own: under load, mlp's batch of 8 (50 us alone) took
100-250 us of the thread's CPU, and 120-190 us of the loop's time inline. A fast batch is
cheaper run where the request already is; a long one must never block the loop, since other
models' requests would wait behind it. The bound is 1 ms: under load on the 2-core machine
mlp's batches of 1 to 19 requests took 140-210 us inline at the median, and whole windows of
them over 200 us in the machine's slow spells, so a bound of 200 us (until 2026-12-06) sent
their sizes back to the thread window after window, each time for twice as many batches, and a
server up for a few minutes ran them on the thread at 0.8 of the rate inline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

INLINE_LIMIT_NS = 1_000_000  # the longest typical batch that may block the event loop
# One inline batch over SPIKE_FACTOR x the limit sends its size back at once: beyond what a
# wait for the GIL adds to a fast batch (up to the 5 ms switch interval, measured 1-2 ms when
# gRPC's poller thread takes it while the framework computes).
SPIKE_FACTOR = 25
WAIT_FACTOR = 5  # a threaded batch's wall time holds GIL waits, bounded by the 5 ms switch interval
MOST_NEEDED = 4096  # the back-off's bound on threaded batches before a size tries the loop
WINDOW = 8  # batch times kept per batch size; a size is first judged once it has this many


@dataclass(frozen=True, slots=True)
class InlineRule:
    """How an instance chooses between its thread and the event loop for a batch."""

    limit_ns: int = INLINE_LIMIT_NS  # 0: always on the thread
    window: int = WINDOW  # measurements per batch size before it may run inline


def runs_inline(
    rule: InlineRule,
    threaded: Sequence[tuple[int, int]],
    inline_ns: Sequence[int],
    *,
    inline_now: bool,
    needed: int,
) -> bool:
    """Whether the next batch of a size runs inline, from that size's recent batch times.

    On the thread a batch is timed twice, (CPU time of the thread, wall time): its wall time
    there also holds its waits for the GIL, which under load are milliseconds and which the
    loop does not pay for running it inline, so the CPU time is the estimate; the wall time
    only rules out a framework that waits on threads of its own for long. With `needed`
    threaded batches, the fastest within the limit (and its wall time within WAIT_FACTOR x the
    limit) lets the size try the loop. Inline, the wall time is what the loop was blocked for:
    the median of the recent inline batches must stay within the limit, and one batch beyond
    SPIKE_FACTOR x the limit sends the size back.
    """
    if rule.limit_ns <= 0:
        return False
    if inline_now:
        if not inline_ns:
            return True
        if inline_ns[-1] > SPIKE_FACTOR * rule.limit_ns:
            return False
        ordered = sorted(inline_ns)
        return ordered[len(ordered) // 2] <= rule.limit_ns
    if len(threaded) < needed:
        return False
    cpu_ns = min(cpu for cpu, _ in threaded)
    wall_ns = min(wall for _, wall in threaded)
    return cpu_ns <= rule.limit_ns and wall_ns <= WAIT_FACTOR * rule.limit_ns


class BatchTimes:
    """The recent batch times of one instance, by batch size, and where each size runs now.

    A size sent back to the thread needs twice as many threaded batches as the last time before
    it may try the loop again, so a model whose thread time misleads (its framework computes
    on threads of its own) blocks the loop ever more rarely."""

    def __init__(self, rule: InlineRule) -> None:
        self._rule = rule
        self._threaded: dict[int, deque[tuple[int, int]]] = {}
        self._inline: dict[int, deque[int]] = {}
        self._needed: dict[int, int] = {}  # threaded batches a size needs before it may try
        self._inline_sizes: set[int] = set()
        self._since: dict[int, int] = {}  # inline batches of a size since its last decision

    def inline(self, size: int) -> bool:
        """Whether a batch of `size` runs inline now."""
        return size in self._inline_sizes

    def record_inline(self, size: int, wall_ns: int) -> None:
        """One inline batch's wall time; decides where the next batch of its size runs (the
        median is taken again once a window of new times has come, a spike is seen at once)."""
        times = self._inline.get(size)
        if times is None:
            times = self._inline[size] = deque(maxlen=self._rule.window)
        times.append(wall_ns)
        self._since[size] = since = self._since.get(size, 0) + 1
        if since >= self._rule.window or wall_ns > SPIKE_FACTOR * self._rule.limit_ns:
            self._since[size] = 0
            self._decide(size)

    def record_threaded(self, size: int, cpu_ns: int, wall_ns: int) -> None:
        """One threaded batch's CPU and wall time; decides where the next batch of its size
        runs."""
        times = self._threaded.get(size)
        if times is None:
            needed = self._needed.get(size, self._rule.window)
            times = self._threaded[size] = deque(maxlen=needed)
        times.append((cpu_ns, wall_ns))
        self._decide(size)

    def _decide(self, size: int) -> None:
        now_inline = size in self._inline_sizes
        needed = self._needed.get(size, self._rule.window)
        threaded, inlined = self._threaded.get(size, ()), self._inline.get(size, ())
        if runs_inline(self._rule, threaded, inlined, inline_now=now_inline, needed=needed):
            self._inline_sizes.add(size)
        elif now_inline:  # back to the thread, measured there afresh before it may come back
            self._inline_sizes.discard(size)
            self._threaded.pop(size, None)
            self._inline.pop(size, None)
            self._since.pop(size, None)
            self._needed[size] = min(2 * needed, MOST_NEEDED)
