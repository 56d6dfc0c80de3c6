"""Natural batching: what a dynamic batcher without a queue delay does while the event loop is
saturated.

Triton's dynamic batcher without a delay still forms batches under load: its front end accepts
requests on threads of its own while an instance computes, and the next batch holds what came
meanwhile. Convoy's front end and a fast model's batches share the event loop, where unary gRPC
calls reach the batcher one at a time, so the same config batches nothing: every request pays a
whole batch's cost on the loop (mlp over unary gRPC, 2 cores, c = 32: batches of 1.02, about 190
us of the loop's CPU per batch). While the loop is saturated a short wait costs the client
nothing it would not wait anyway, in line behind the others, and each batch-mate saves the loop
a batch. So once the loop's thread has been busy for `SATURATED` of the time for `START_WINDOWS`
windows in a row and the batches sent at once stay under `SMALL_BATCH` rows on average, such a
batcher waits up to `NATURAL_DELAY_NS` for batch-mates, ending each wait at the size recent
waits reached (the adaptive delay). Front ends that hand the batcher several requests a turn
(HTTP, gRPC streams) batch without waiting at high load, where waiting lost them 12-15%: their
batches are not small. The waits stop once the share drops under `UNSATURATED`, and every
`RECHECK_WINDOWS` windows for one window, to see what batches go at once then. The two
thresholds differ because batching itself frees the loop: with one threshold, the share would
fall as the waits began and end them.

Waits need batch-mates that could come: a window counts only when a batch went while another of
the model's requests was in flight. A lone client's requests come one at a time, and its loop can
read as saturated with none of them waiting (the idle poll, `server.contract.idle_poll`, keeps the
loop's thread busy between them): mlp with `dynamic_batching { }` and one unary gRPC client (the
2-core machine) switched its waits on and off every second or so before this rule, and never
after it, while 8 and 32 clients still formed batches of 5.4-7.1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from batching.policy import BatchPolicy

# mlp over unary gRPC, 2 cores, c = 32: 4,180-4,262 infer/s with 1 ms, 4,496-4,782 with 2 ms and
# 4,971 with 4 ms (c = 8 the same for all three); a probe (every 100 ms or more) waits it whole
NATURAL_DELAY_NS = 2_000_000
SATURATED = 0.9  # the loop thread's busy share that starts the waits
UNSATURATED = 0.6  # and the share under which they stop
SMALL_BATCH = 4.0  # batches sent at once this large on average need no waits
WINDOW_NS = 20_000_000  # the loop's busy share and the batches are measured over windows
START_WINDOWS = 5  # saturated windows in a row before the waits begin
RECHECK_WINDOWS = 50  # windows of waits before one without, to measure batches sent at once


def natural_policy(policy: BatchPolicy) -> BatchPolicy:
    """The policy batches are formed with while the batcher waits for batch-mates."""
    return replace(policy, max_queue_delay_ns=NATURAL_DELAY_NS, adaptive_delay=True)


@dataclass(frozen=True, slots=True)
class Streak:
    """Where a batcher stands, in windows."""

    saturated: int = 0  # in a row, saturated with small batches, before the waits began
    waiting: int = 0  # in a row with waits (0: batches go at once)


def next_streak(streak: Streak, busy: float, mean_batch: float, crowded: bool) -> Streak:
    """The streak after a window in which the loop's thread was busy for `busy` of the time and
    the batcher's batches held `mean_batch` rows on average; `crowded`: some batch went while
    another of the model's requests was in flight. Waits begin after `START_WINDOWS` saturated,
    crowded windows in a row (a loop busy 70% of the time has single windows over 90%), or one
    after the window without waits that checks the batches every `RECHECK_WINDOWS`; a window
    with one request at a time ends them."""
    if not crowded:
        return Streak()
    if streak.waiting:
        if busy < UNSATURATED:
            return Streak()
        if streak.waiting < RECHECK_WINDOWS:
            return Streak(waiting=streak.waiting + 1)
        # A window without waits, to measure the batches that go at once: one more saturated
        # window with small batches, and the waits begin again.
        return Streak(saturated=START_WINDOWS - 1)
    if busy >= SATURATED and mean_batch < SMALL_BATCH:
        saturated = streak.saturated + 1
        return Streak(waiting=1) if saturated >= START_WINDOWS else Streak(saturated=saturated)
    return Streak()


class NaturalBatching:
    """One batcher's natural batching, window by window. Event-loop owned.

    `cpu_ns` is the loop thread's CPU clock (`time.thread_time_ns`); the wall clock is the
    caller's. `sent` counts each batch, with the model's requests in flight as it went;
    `forming` says which policy batches are formed with.
    """

    __slots__ = (
        "_batches",
        "_cpu_ns",
        "_crowded",
        "_natural",
        "_plain",
        "_rows",
        "_start_cpu_ns",
        "_start_ns",
        "streak",
    )

    def __init__(self, policy: BatchPolicy, cpu_ns: Callable[[], int]) -> None:
        self._plain = policy
        self._natural = natural_policy(policy)
        self._cpu_ns = cpu_ns
        self._start_ns = 0  # 0: no window begun
        self._start_cpu_ns = 0
        self._batches = 0
        self._rows = 0
        self._crowded = False  # a batch of this window went beside another request in flight
        self.streak = Streak()

    @property
    def waiting(self) -> bool:
        """Whether batches wait for batch-mates now."""
        return self.streak.waiting > 0

    def sent(self, rows: int, in_flight: int) -> None:
        """A batch of `rows` went; `in_flight`: the model's requests in flight then, its own
        included."""
        self._batches += 1
        self._rows += rows
        if in_flight > 1:
            self._crowded = True

    def forming(self, now_ns: int) -> BatchPolicy | None:
        """At a window's end (`WINDOW_NS` after its start), the policy for the next one when it
        changes; None otherwise."""
        if self._start_ns and now_ns - self._start_ns < WINDOW_NS:
            return None
        cpu_ns = self._cpu_ns()
        started_ns, started_cpu_ns = self._start_ns, self._start_cpu_ns
        batches, rows, crowded = self._batches, self._rows, self._crowded
        self._start_ns, self._start_cpu_ns = now_ns, cpu_ns
        self._batches = self._rows = 0
        self._crowded = False
        if not started_ns:
            return None
        busy = (cpu_ns - started_cpu_ns) / (now_ns - started_ns)
        before = self.streak.waiting
        self.streak = next_streak(self.streak, busy, rows / max(batches, 1), crowded)
        if bool(self.streak.waiting) == bool(before):
            return None
        return self._natural if self.streak.waiting else self._plain
