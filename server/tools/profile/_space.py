"""The configurations a sweep tries: instance counts, max_batch_size, preferred batch size and
max queue delay, each applied to the user's own config (pure)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from proto import model_config_pb2 as mc

KEEP = -1  # a choice that leaves the config's own value


@dataclass(frozen=True, slots=True)
class Variant:
    """One configuration of a model; KEEP leaves a field as the config has it."""

    instances: int = KEEP  # instance count (every group gets it)
    max_batch_size: int = KEEP
    preferred_batch_size: int = KEEP  # one preferred size; 0: none (Triton then uses the max)
    max_queue_delay_us: int = KEEP

    @property
    def label(self) -> str:
        parts = [
            f"{name}={value}"
            for name, value in (
                ("instances", self.instances),
                ("max_batch", self.max_batch_size),
                ("preferred", self.preferred_batch_size),
                ("delay_us", self.max_queue_delay_us),
            )
            if value != KEEP
        ]
        return ", ".join(parts) or "as configured"


def variants(
    instances: Sequence[int],
    max_batch_sizes: Sequence[int],
    preferred: Sequence[int],
    delays_us: Sequence[int],
) -> list[Variant]:
    """Every combination of the choices (an empty choice keeps the config's value)."""
    return [
        Variant(*combination)
        for combination in itertools.product(
            instances or [KEEP], max_batch_sizes or [KEEP], preferred or [KEEP], delays_us or [KEEP]
        )
    ]


def apply(config: mc.ModelConfig, variant: Variant) -> mc.ModelConfig:
    """`config` (as the user wrote it) with the variant's fields set, and nothing else."""
    done = mc.ModelConfig()
    done.CopyFrom(config)
    if variant.instances != KEEP:
        if not done.instance_group:
            done.instance_group.add()
        for group in done.instance_group:
            group.count = variant.instances
    if variant.max_batch_size != KEEP:
        done.max_batch_size = variant.max_batch_size
    batching = variant.preferred_batch_size != KEEP or variant.max_queue_delay_us != KEEP
    if batching:
        done.dynamic_batching.SetInParent()
    if variant.preferred_batch_size != KEEP:
        del done.dynamic_batching.preferred_batch_size[:]
        if variant.preferred_batch_size > 0:
            done.dynamic_batching.preferred_batch_size.append(variant.preferred_batch_size)
    if variant.max_queue_delay_us != KEEP:
        done.dynamic_batching.max_queue_delay_microseconds = variant.max_queue_delay_us
    return done
