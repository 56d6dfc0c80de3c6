"""Batch selection: Triton's dynamic batcher as a pure function of the queue, policy and time.

`next_batch` never sleeps or reads the clock: the batcher passes `now_ns` and acts on the
`Decision` (run these requests now, or wake again at `wait_until_ns`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import msgspec

from batching.errors import PolicyError
from batching.messages import TensorMap
from proto import model_config_pb2 as mc


class TimeoutAction(Enum):
    """What happens to a request whose queue timeout expires."""

    REJECT = "reject"  # fail it with UNAVAILABLE "Request timeout expired"
    DELAY = "delay"  # serve it after the requests of its level that have not expired


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Timeouts and bound of one priority level."""

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_ns: int = 0  # 0: requests never time out unless they ask to
    allow_timeout_override: bool = False  # a request's "timeout" parameter may shorten it
    max_queue_size: int = 0  # 0: unbounded

    @classmethod
    def from_config(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            timeout_action=(
                TimeoutAction.DELAY
                if policy.timeout_action == mc.ModelQueuePolicy.DELAY
                else TimeoutAction.REJECT
            ),
            default_timeout_ns=policy.default_timeout_microseconds * 1000,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )

    def deadline_ns(self, enqueue_ns: int, requested_timeout_ns: int) -> int | None:
        """When a request enqueued at `enqueue_ns` expires; None for never."""
        timeout_ns = self.default_timeout_ns
        if (
            self.allow_timeout_override
            and requested_timeout_ns > 0
            and (timeout_ns == 0 or requested_timeout_ns < timeout_ns)
        ):
            timeout_ns = requested_timeout_ns
        return enqueue_ns + timeout_ns if timeout_ns > 0 else None


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """How one model version forms batches; read from its config once, at load."""

    dynamic: bool  # dynamic_batching {} present; otherwise one request per execution
    max_batch_size: int  # 0: the model does not batch
    preferred_batch_sizes: tuple[int, ...]  # ascending; [max_batch_size] when none given
    max_queue_delay_ns: int
    preserve_ordering: bool
    priority_levels: int  # >= 1; level 1 is served first
    default_priority_level: int  # in 1..priority_levels
    queue_policies: tuple[QueuePolicy, ...]  # one per level, index 0 is level 1
    equal_shape_inputs: tuple[str, ...] = ()  # inputs whose shapes must match within a batch
    # End a wait at the size recent waits reached (Convoy's): from_config turns it on for a
    # model with a queue delay unless convoy_adaptive_queue_delay says "false".
    adaptive_delay: bool = False
    latency_target_ns: int = 0  # convoy_latency_target_ms (p99 in the server); 0: none
    fair_share: bool = False  # convoy_fair_share: a level serves the class served least lately
    share_weights: tuple[tuple[str, int], ...] = ()  # (class, weight >= 1); others weigh 1
    natural_batching: bool = True  # without a delay, wait for batch-mates on a saturated loop

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchPolicy:
        batching = config.dynamic_batching
        dynamic = config.HasField("dynamic_batching") and config.max_batch_size > 0
        levels = max(int(batching.priority_levels), 1)
        default_level = int(batching.default_priority_level) if batching.priority_levels else 1
        if not 1 <= default_level <= levels:
            raise PolicyError(
                f"model '{config.name}': default_priority_level must be in 1..{levels}, "
                f"got {default_level}"
            )
        default_queue = QueuePolicy.from_config(batching.default_queue_policy)
        queues = tuple(
            QueuePolicy.from_config(batching.priority_queue_policy[level])
            if level in batching.priority_queue_policy
            else default_queue
            for level in range(1, levels + 1)
        )
        preferred = sorted(
            size for size in batching.preferred_batch_size if 0 < size <= config.max_batch_size
        )
        adaptive = _parameter(config, "convoy_adaptive_queue_delay").lower()
        target_ms = _parameter(config, "convoy_latency_target_ms")
        try:
            target = float(target_ms) if target_ms else 0.0
        except ValueError:
            target = math.nan
        if not (math.isfinite(target) and target >= 0) or (target_ms and target == 0):
            raise PolicyError(
                f"model '{config.name}': convoy_latency_target_ms must be a positive number of "
                f"milliseconds, got '{target_ms}'"
            )
        return cls(
            dynamic=dynamic,
            max_batch_size=config.max_batch_size,
            preferred_batch_sizes=tuple(preferred) or (max(config.max_batch_size, 1),),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
            preserve_ordering=batching.preserve_ordering,
            priority_levels=levels,
            default_priority_level=default_level,
            queue_policies=queues,
            equal_shape_inputs=tuple(
                tensor.name
                for tensor in config.input
                if tensor.optional
                or tensor.is_shape_tensor
                or (-1 in tensor.dims and not tensor.allow_ragged_batch)
            ),
            adaptive_delay=adaptive not in _FALSE and batching.max_queue_delay_microseconds > 0,
            latency_target_ns=round(target * 1_000_000) if dynamic else 0,
            fair_share=_parameter(config, "convoy_fair_share").lower() in _TRUE,
            share_weights=_weights(config),
            natural_batching=_parameter(config, "convoy_natural_batching").lower() not in _FALSE,
        )

    def shape_key(self, inputs: TensorMap) -> tuple[object, ...]:
        """What must be equal for two requests to share a batch (shapes after the batch dim)."""
        if not self.equal_shape_inputs:  # most models: every request shares one key
            return ()
        return tuple(
            inputs[name].shape[1:] if name in inputs else None for name in self.equal_shape_inputs
        )

    def level_of(self, priority: int) -> int:
        """The level a request's "priority" parameter selects (0 or out of range: default)."""
        if priority < 1 or priority > self.priority_levels:
            return self.default_priority_level
        return priority


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _parameter(config: mc.ModelConfig, key: str) -> str:
    # Membership, not indexing: indexing a protobuf map inserts the key into the config.
    return config.parameters[key].string_value.strip() if key in config.parameters else ""


def _weights(config: mc.ModelConfig) -> tuple[tuple[str, int], ...]:
    """convoy_fair_share_weights: "gold=4,silver=2" (a class's requests to a weight 1's one)."""
    text = _parameter(config, "convoy_fair_share_weights")
    weights = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        share, _, weight = item.rpartition("=")
        if not share or not weight.isdigit() or int(weight) < 1:
            raise PolicyError(
                f"model '{config.name}': convoy_fair_share_weights takes CLASS=WEIGHT pairs "
                f"with whole weights >= 1, separated by commas; got '{item}'"
            )
        weights.append((share.strip(), int(weight)))
    return tuple(weights)


class Candidate(msgspec.Struct, frozen=True):
    """What selection needs to know about one queued request."""

    batch_size: int  # the request's own batch dimension (1 for a non-batching model)
    enqueue_ns: int
    shape_key: tuple[object, ...]  # shapes of the inputs whose shapes must match in a batch


@dataclass(frozen=True, slots=True)
class Decision:
    """Take the first `count` candidates now, or (count 0) wake again at `wait_until_ns`."""

    count: int
    wait_until_ns: int | None = None  # None with count 0: nothing to do until a change
    size: int = 0  # batch size of the requests taken, or pending while waiting
    waited: bool = False  # taken because its oldest request waited out the queue delay


NOTHING = Decision(0)


def next_batch(
    candidates: Iterable[Candidate],
    policy: BatchPolicy,
    now_ns: int,
    reach: int | None = None,
) -> Decision:
    """Triton's choice for the next batch, from the queued requests in service order.

    `reach` is the batch size that recent waits for the whole delay reached (None: unknown);
    only the adaptive delay reads it, to send a batch that has reached it without waiting on,
    and to hold one at a smaller preferred size for the largest (`holds_for_largest`).
    """
    if not policy.dynamic:
        first = next(iter(candidates), None)
        return NOTHING if first is None else Decision(1, size=first.batch_size)
    largest_preferred = policy.preferred_batch_sizes[-1]
    pending = 0  # requests' batch sizes added up
    count = 0
    preferred_count = preferred_size = 0  # at the largest preferred size seen so far
    oldest_ns: int | None = None
    first_shape: tuple[object, ...] | None = None
    send_now = False
    for candidate in candidates:
        if count and (
            pending + candidate.batch_size > policy.max_batch_size
            or candidate.shape_key != first_shape
        ):
            send_now = True  # no reordering: the batch is cut here
            break
        if not count:
            first_shape = candidate.shape_key
        count += 1
        pending += candidate.batch_size
        oldest_ns = (
            candidate.enqueue_ns if oldest_ns is None else min(oldest_ns, candidate.enqueue_ns)
        )
        if pending in policy.preferred_batch_sizes:
            preferred_count, preferred_size = count, pending
    if not count or oldest_ns is None:
        return NOTHING
    waited_ns = now_ns - oldest_ns
    delay_exceeded = policy.max_queue_delay_ns != 0 and waited_ns >= policy.max_queue_delay_ns
    if (
        preferred_count
        and not delay_exceeded
        and (preferred_size == largest_preferred or not holds_for_largest(policy, reach))
    ):
        return Decision(preferred_count, size=preferred_size)
    if send_now or pending >= largest_preferred:
        return Decision(count, size=pending)
    if delay_exceeded or policy.max_queue_delay_ns == 0:
        return Decision(count, size=pending, waited=delay_exceeded)
    if policy.adaptive_delay and reach is not None and pending >= reach:
        # Waiting out the delay lately grew no batch beyond this: the rest would be idle.
        return Decision(count, size=pending)
    return Decision(0, oldest_ns + policy.max_queue_delay_ns, size=pending)


def grows_quietly(policy: BatchPolicy, pending: int, rows: int, reach: int | None = None) -> bool:
    """Whether `rows` joining the end of a batch of `pending` rows that `next_batch` chose to
    wait for (all of one shape, with the same `reach`) leave that choice a wait: the batch
    reaches no preferred size it would be sent at (`holds_for_largest`), nor the largest (so
    not the maximum either), nor the adaptive delay's reach."""
    total = pending + rows
    if policy.adaptive_delay and reach is not None and total >= reach:
        return False
    if total >= policy.preferred_batch_sizes[-1]:
        return False
    return total not in policy.preferred_batch_sizes or holds_for_largest(policy, reach)


def holds_for_largest(policy: BatchPolicy, reach: int | None) -> bool:
    """Whether a batch at a preferred size smaller than the largest waits on, within the
    delay, for the largest, where Triton sends it at once: under the adaptive delay, when
    waiting out the delay lately reached the largest preferred size (`reach`), or to find out
    whether it does (a probe: `reach` None). Where clients keep coming (32 on mlp with
    preferred [8, 16], a saturated event loop), batches of 16 instead of 8 halve what the
    batches cost; where they do not (8 clients), the probe's batch alone waits, and the reach
    it finds keeps Triton's rule until the next probe."""
    preferred = policy.preferred_batch_sizes
    return (
        policy.adaptive_delay
        and policy.max_queue_delay_ns > 0
        and (reach is None or reach >= preferred[-1])
    )
