"""A latency target (convoy_latency_target_ms): batch times measured per batch size, and the pure
rules the batcher keeps the target with: the batch size and delay it batches with (`plan`),
and whether a new request can still be answered in time (`predicted_ns`, `Correction`).

The target is a p99 inside the server: a request that arrives just as a batch starts waits for
that batch, then runs in the next, so two batches of b must fit in the target. Work ahead
of a request is predicted at its mean, the request's own batch high (about its p99): the p99 of a
sum is well below the sum of the p99s.

What the prediction leaves out (the gaps between batches, an instance slowed by the work around
it, tails heavier than the spread) is learned from the answers (`Correction`): each taken
request's time in the batcher over its prediction when it was taken (for one that ran at once,
its own batch's), and predictions are scaled by the p99 of that ratio over the last answers, so
a request admitted at the target's edge is late about one time in a hundred. The scale follows
the machine both ways: up as soon as answers run late, down again when they run early.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from batching.errors import LatencyTargetError
from batching.policy import BatchPolicy
from batching.turns import Turns

_ALPHA = 0.2  # weight of a new execution in the running mean and deviation
_SPREAD = 3.0  # a batch's time for the p99: its mean plus this many mean absolute deviations
_REPLAN_NS = 50_000_000  # the batch size and delay are chosen again at most this often
_WINDOW = 256  # answers the correction is learned from
_RELEARN = 32  # the correction is computed again after this many answers
_QUANTILE = 0.99
_CORRECTION_RANGE = (0.5, 4.0)
_LEARN_FROM = 1 / 8  # the least prediction learned from, as a share of the target


@dataclass(slots=True)
class BatchTimes:
    """Running mean and mean absolute deviation of execution time (ns) per batch size."""

    mean_ns: dict[int, float] = field(default_factory=dict)
    deviation_ns: dict[int, float] = field(default_factory=dict)

    def record(self, size: int, elapsed_ns: int) -> None:
        mean = self.mean_ns.get(size)
        if mean is None:
            self.mean_ns[size], self.deviation_ns[size] = float(elapsed_ns), 0.0
            return
        self.deviation_ns[size] += _ALPHA * (abs(elapsed_ns - mean) - self.deviation_ns[size])
        self.mean_ns[size] = mean + _ALPHA * (elapsed_ns - mean)

    def predict_ns(self, size: int, spread: float = _SPREAD) -> float | None:
        """A high estimate (about p99; `spread` 0: the mean) of one batch of `size`; None
        before any measurement. Between measured sizes the time is interpolated; above the
        largest it grows in proportion to the size, below the smallest it is the smallest's."""
        mean = self.mean_ns.get(size)
        if mean is not None:  # the common case, after every batch: no sort, no closure
            return mean + spread * self.deviation_ns[size]
        if not self.mean_ns:
            return None
        sizes = sorted(self.mean_ns)

        def high(known: int) -> float:
            return self.mean_ns[known] + spread * self.deviation_ns[known]

        below = [s for s in sizes if s < size]
        above = [s for s in sizes if s > size]
        if not below:
            return high(above[0])
        if not above:
            return high(below[-1]) * size / below[-1]
        low, up = below[-1], above[0]
        share = (size - low) / (up - low)
        return high(low) + share * (high(up) - high(low))


def request_share_ns(times: BatchTimes, batch_size: int, instances: int) -> int:
    """One request's share of the machine: a batch of `batch_size`'s mean time over its size
    and the instances that run such batches side by side (0 before any measurement)."""
    batch_ns = times.predict_ns(batch_size, spread=0.0) or 0.0
    return int(batch_ns / max(batch_size, 1) / max(instances, 1))


class Correction:
    """How far answers run past their predictions: the p99 of (time in the batcher) / (time
    predicted at admission) over the last `_WINDOW` answers, within `_CORRECTION_RANGE`; 1.0
    until `_RELEARN` answers have been seen."""

    __slots__ = ("_ratios", "_since", "scale")

    def __init__(self) -> None:
        self._ratios: deque[float] = deque(maxlen=_WINDOW)
        self._since = 0
        self.scale = 1.0

    def observe(self, elapsed_ns: int, predicted_ns: float) -> None:
        self._ratios.append(elapsed_ns / predicted_ns)
        self._since += 1
        if self._since >= _RELEARN:
            self._since = 0
            ordered = sorted(self._ratios)
            low, high = _CORRECTION_RANGE
            self.scale = min(high, max(low, ordered[int(_QUANTILE * (len(ordered) - 1))]))


@dataclass(frozen=True, slots=True)
class TargetPlan:
    """The batch bound and delay that keep the target, from the batch times measured so far."""

    max_batch_size: int  # >= 1
    max_queue_delay_ns: int  # >= 0


def plan(times: BatchTimes, policy: BatchPolicy, scale: float = 1.0) -> TargetPlan:
    """The largest batch size b for which waiting out one batch of b (its mean) and then
    running one's own (high) fits the target, and a delay that waits for batch-mates no longer
    than the target leaves room for (and at most one batch's mean time: while an instance is
    busy for that long, requests gather anyway). The model's own max_queue_delay, when set,
    bounds the delay; before any measurement, the config's. `scale`: how far answers run past
    predictions (`Correction`); the target is kept for predictions so scaled."""
    target_ns = policy.latency_target_ns / scale
    configured = TargetPlan(policy.max_batch_size, policy.max_queue_delay_ns)
    if policy.latency_target_ns <= 0 or times.predict_ns(1) is None:
        return configured

    def worst_ns(size: int) -> float:  # a batch of `size` waited for, then one's own
        return (times.predict_ns(size, spread=0.0) or 0.0) + (times.predict_ns(size) or 0.0)

    size = 1
    for candidate in range(policy.max_batch_size, 0, -1):
        if worst_ns(candidate) <= target_ns:
            size = candidate
            break
    batch_ns = times.predict_ns(size, spread=0.0) or 0.0
    delay_ns = int(max(0.0, min(target_ns - worst_ns(size), batch_ns)))
    if policy.max_queue_delay_ns:
        delay_ns = min(delay_ns, policy.max_queue_delay_ns)
    return TargetPlan(size, delay_ns)


@dataclass(frozen=True, slots=True)
class Load:
    """What is ahead of a new request when it arrives."""

    queued: int  # batch units waiting in the queue
    free_in_ns: int  # until an instance is free (0: one is idle now)
    instances: int  # >= 1


def predicted_ns(times: BatchTimes, chosen: TargetPlan, load: Load) -> float | None:
    """How long a new request would take in the server (wait plus its batch), high estimate;
    None before any measurement. The full batches ahead of it run `instances` at a time, after
    the first instance frees; its own batch holds what is left over and itself."""
    size = max(chosen.max_batch_size, 1)
    full_ns = times.predict_ns(size, spread=0.0)
    own_ns = times.predict_ns(min(size, load.queued % size + 1))
    if full_ns is None or own_ns is None:
        return None
    rounds = load.queued // size // max(load.instances, 1)
    return load.free_in_ns + rounds * full_ns + own_ns


class TargetKeeper:
    """One batcher's latency target: measures its batches, chooses how batches are formed,
    and refuses at once the requests it cannot answer in time. Event-loop owned."""

    def __init__(
        self, name: str, policy: BatchPolicy, times: BatchTimes, turns: Turns | None = None
    ) -> None:
        self._name = name
        self._policy = policy
        self.times = times  # the batcher's, which records every batch
        # The refusals' retry hints: the batcher's, whose full queue refuses too.
        self._turns = Turns() if turns is None else turns
        self.chosen = TargetPlan(policy.max_batch_size, policy.max_queue_delay_ns)
        self.forming = policy  # the policy batches are formed with
        self._planned_ns: int | None = None
        self._running: dict[int, tuple[int, int]] = {}  # id(instance) -> (start_ns, size)
        self.correction = Correction()

    def admit(self, now_ns: int, queued: int, idle: bool, instances: int) -> float:
        """The request's predicted time in the batcher (ns; 0 before any measurement). Raise
        LatencyTargetError when a request arriving now would miss the target because of the
        work ahead of it, its prediction scaled by how far answers have run past theirs. One
        that would run at once is always taken: waiting elsewhere would not make it faster, and
        its batch keeps the measured times current. It is predicted all the same: were only the
        requests with work ahead learned from, a high scale that refuses them would never
        learn that it could come down."""
        if idle and not queued:  # taken; predicted, so that the correction learns from it
            return predicted_ns(self.times, self.chosen, Load(0, 0, instances)) or 0.0
        free_in_ns = 0.0
        if not idle and self._running:
            free_in_ns = min(
                max(0.0, start_ns + (self.times.predict_ns(size, spread=0.0) or 0.0) - now_ns)
                for start_ns, size in self._running.values()
            )
        load = Load(queued, int(free_in_ns), instances)
        predicted = predicted_ns(self.times, self.chosen, load)
        if predicted is None:
            return 0.0
        target_ns = self._policy.latency_target_ns
        expected_ns = predicted * self.correction.scale
        if expected_ns > target_ns:
            # The request would fit once the work ahead has run for the excess.
            fits_ns = now_ns + int(expected_ns - target_ns)
            share_ns = request_share_ns(self.times, self.chosen.max_batch_size, instances)
            retry_after_ns = self._turns.tell(now_ns, fits_ns, share_ns)
            raise LatencyTargetError(
                f"model '{self._name}' is over its latency target of {target_ns / 1e6:g} ms "
                f"(convoy_latency_target_ms): a new request would take about "
                f"{expected_ns / 1e6:.0f} ms with {queued} queued; "
                f"retry in {math.ceil(retry_after_ns / 1e6)} ms",
                retry_after_ns,
            )
        return predicted

    def started(self, instance: object, start_ns: int, size: int) -> None:
        self._running[id(instance)] = (start_ns, size)

    def finished(self, instance: object) -> None:
        self._running.pop(id(instance), None)

    def answered(self, elapsed_ns: int, predicted_ns: float) -> None:
        """A request answered `elapsed_ns` after it was queued, predicted at admission to take
        `predicted_ns` (0: none). Predictions under `_LEARN_FROM` of the target are not learned
        from: fixed costs (the loop's turn, the hand-off) swell their ratio, and even scaled by
        the correction's largest value they stay under half the target, so they refuse nothing."""
        if predicted_ns >= _LEARN_FROM * self._policy.latency_target_ns:
            self.correction.observe(elapsed_ns, predicted_ns)

    def measured(self, end_ns: int) -> BatchPolicy:
        """After a batch (its time recorded): the policy to form batches with from now on."""
        if self._planned_ns is None or end_ns - self._planned_ns >= _REPLAN_NS:
            self._planned_ns = end_ns
            self.chosen = plan(self.times, self._policy, self.correction.scale)
            self.forming = bounded(self._policy, self.chosen)
        return self.forming


def bounded(policy: BatchPolicy, chosen: TargetPlan) -> BatchPolicy:
    """The model's policy bounded by a plan, with the adaptive delay on."""
    preferred = tuple(p for p in policy.preferred_batch_sizes if p <= chosen.max_batch_size)
    return replace(
        policy,
        max_batch_size=chosen.max_batch_size,
        preferred_batch_sizes=preferred or (chosen.max_batch_size,),
        max_queue_delay_ns=chosen.max_queue_delay_ns,
        adaptive_delay=True,
    )
