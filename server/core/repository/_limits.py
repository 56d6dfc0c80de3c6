"""What the rate limiter knows of a version's instances: each one's needs from its instance
group's `rate_limiter` and its device, checked at load against the explicit resource counts (a
load error naming both numbers), then registered with the server's one limiter."""

from __future__ import annotations

from collections.abc import Sequence

from backends import Instance, Placement
from batching import Executor, Needs, RateLimiter, ResourceWait
from proto import model_config_pb2 as mc


def instance_group(
    config: mc.ModelConfig, placements: Sequence[Placement], index: int
) -> mc.ModelInstanceGroup:
    """The group instance `index` belongs to (its placement's); an empty group when none is
    known."""
    groups = list(config.instance_group)
    by_name = {group.name or f"{config.name}_{i}": group for i, group in enumerate(groups)}
    return by_name.get(placements[index].group, mc.ModelInstanceGroup())


def instance_needs(
    limiter: RateLimiter | None,
    config: mc.ModelConfig,
    placements: Sequence[Placement],
    instances: Sequence[Instance],
    first: int = 0,
) -> list[Needs]:
    """The needs of `instances` (the version's from index `first`), each checked against the
    explicit counts (PolicyError); none when the rate limiter is off."""
    if limiter is None:
        return []
    needs = []
    for offset, instance in enumerate(instances):
        # Where it was placed (a Python model's GPU instance computes on host arrays), or, for
        # a KIND_AUTO one, where it runs.
        placement = placements[first + offset]
        place = instance.device if placement.auto else placement.device
        device = place.id if place.is_cuda else -1
        group = instance_group(config, placements, first + offset)
        need = Needs.from_group(group, device)
        limiter.check(need, f"model '{config.name}' instance '{instance.name}'")
        needs.append(need)
    return needs


def register_instances(
    limiter: RateLimiter | None,
    executors: Sequence[Executor],
    needs: Sequence[Needs],
    wait: ResourceWait | None,
) -> ResourceWait | None:
    """Register the executors with their needs; the version's resource wait (a new one when
    `wait` is None), or None when the rate limiter is off."""
    if limiter is None:
        return None
    wait = wait if wait is not None else ResourceWait()
    for executor, need in zip(executors, needs, strict=True):
        limiter.register(executor, need, wait)
    return wait
