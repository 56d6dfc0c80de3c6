"""The sequence batcher's rules as data: a stateful model's scheduling policy, read from its
config once at load, and `ready_batch`, the pure choice of what an idle instance runs
(`batching.sequence` waits and dispatches)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np


class ControlKind(Enum):
    START = "start"
    END = "end"
    READY = "ready"
    CORRID = "corrid"


class Strategy(Enum):
    DIRECT = "direct"
    OLDEST = "oldest"


@dataclass(frozen=True, slots=True)
class Control:
    """One control tensor the model takes: its name, and the values it reads as false and true
    (0-d arrays of the tensor's data type). CORRID carries the correlation id in `false`'s data
    type; its `false` is what a null request carries (0 or an empty string)."""

    kind: ControlKind
    name: str
    false: np.ndarray
    true: np.ndarray


@dataclass(frozen=True, slots=True)
class ImplicitState:
    """A state the server keeps per sequence: the model reads it from `input_name` and writes
    the next one to `output_name`; a START request reads `initial` (the config's dims)."""

    input_name: str
    output_name: str
    initial: np.ndarray


@dataclass(frozen=True, slots=True)
class SequencePolicy:
    """How one stateful model version schedules; read from its config once, at load."""

    model: str  # the model's name, as errors name it
    batching: bool  # max_batch_size > 0: every tensor has a leading batch dim of 1 per request
    slots: int  # per instance: DIRECT max(max_batch_size, 1), OLDEST max_candidate_sequences
    max_batch_size: int  # requests per execution (at least 1)
    strategy: Strategy = Strategy.DIRECT
    idle_ns: int = 1_000_000_000
    max_queue_delay_ns: int = 0
    minimum_slot_utilization: float = 0.0  # DIRECT: share of slots ready before running early
    preferred_batch_sizes: tuple[int, ...] = ()  # OLDEST, ascending
    controls: tuple[Control, ...] = ()
    states: tuple[ImplicitState, ...] = ()
    iterative: bool = False  # each request is a sequence, which the model may reschedule

    @property
    def state_outputs(self) -> frozenset[str]:
        return frozenset(state.output_name for state in self.states)


@dataclass(frozen=True, slots=True)
class Selection:
    """What a lane runs now (batch positions; None: a null request), or when to look again."""

    positions: tuple[int | None, ...] = ()  # slot indexes, in batch order
    wait_until_ns: int | None = None


def ready_batch(
    slots: Sequence[tuple[int, int] | None], policy: SequencePolicy, now_ns: int
) -> Selection:
    """Which slots one idle instance runs now. `slots[i]` is (enqueue time of the ready request,
    arrival number) for a slot whose sequence has a request ready, None otherwise."""
    ready = [(slot, mark) for slot, mark in enumerate(slots) if mark is not None]
    if not ready:
        return Selection()
    oldest_ns = min(mark[0] for _, mark in ready)
    due_ns = oldest_ns + policy.max_queue_delay_ns
    if policy.strategy is Strategy.DIRECT:
        # As Triton: a delay needs both settings; either one reached runs the batch.
        utilization = policy.minimum_slot_utilization
        waits = policy.max_queue_delay_ns > 0 and utilization > 0
        if waits and now_ns < due_ns and len(ready) < utilization * len(slots):
            return Selection(wait_until_ns=due_ns)
        last = max(slot for slot, _ in ready)
        taken = {slot for slot, _ in ready}
        return Selection(tuple(slot if slot in taken else None for slot in range(last + 1)))
    by_age = sorted(ready, key=lambda entry: entry[1])
    count = min(len(by_age), policy.max_batch_size)
    if count < policy.max_batch_size and policy.max_queue_delay_ns and now_ns < due_ns:
        preferred = [size for size in policy.preferred_batch_sizes if size <= count]
        if not preferred or preferred[-1] != count:
            return Selection(wait_until_ns=due_ns)
    return Selection(tuple(slot for slot, _ in by_age[:count]))
