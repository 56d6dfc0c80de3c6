"""Triton's rate limiter, the pure part: what an instance needs (`Needs`, from its instance
group's `rate_limiter`), how many of each resource there are (`resource_counts`), and which
waiting instances run next (`grants`), as functions of explicit state (times included).

A resource is named per device (each device has its own copies) or global (one set for the
machine). Among instances waiting for the same resources, the one with the fewest executions
weighted by its priority goes first (priority 2 gets half the chances of priority 1; 0 counts as
1); one that cannot run yet holds back what it needs from those ranked below it, so a large
need is never starved by smaller ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from batching.errors import PolicyError
from proto import model_config_pb2 as mc

GLOBAL = None  # the device of a global resource
Resource = tuple[str, int | None]  # (name, device id; None: global)


@dataclass(frozen=True, slots=True)
class Needs:
    """What one instance holds while it executes, and its priority among contenders."""

    resources: Mapping[Resource, int]  # copies held per resource; empty: never waits
    priority: int = 1  # >= 1; a larger value gets proportionally fewer chances

    @classmethod
    def from_group(cls, group: mc.ModelInstanceGroup, device: int) -> Needs:
        """An instance of `group` placed on `device` (-1: the CPU)."""
        limiter = group.rate_limiter
        resources: dict[Resource, int] = {}
        for resource in limiter.resources:
            key = (resource.name, GLOBAL if getattr(resource, "global") else device)  # a keyword
            resources[key] = resources.get(key, 0) + resource.count
        return cls(resources, max(limiter.priority, 1))


@dataclass(frozen=True, slots=True)
class ExplicitCount:
    """One `--rate-limit-resource NAME:COUNT[:DEVICE]`."""

    name: str
    count: int
    device: int | None = None  # None: every device (and the global resource of that name)


@dataclass(frozen=True, slots=True)
class Contender:
    """An instance with a batch ready, waiting for its resources."""

    ident: int  # the limiter's handle of the instance
    needs: Needs
    executions: int  # executions it has had since it was registered
    waiting_since_ns: int  # ties go to the one waiting longest


def parse_explicit(text: str) -> ExplicitCount:
    """`NAME:COUNT[:DEVICE]` as Triton's --rate-limit-resource; PolicyError otherwise."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        raise PolicyError(
            f"--rate-limit-resource '{text}': expected <name>:<count> or <name>:<count>:<device>"
        )
    return ExplicitCount(parts[0], int(parts[1]), int(parts[2]) if len(parts) == 3 else None)


def resource_counts(
    instances: Iterable[Needs], explicit: Sequence[ExplicitCount]
) -> dict[Resource, int]:
    """Copies of every resource an instance names: the explicit count where one is given (a
    device's own before the one for every device), else the most any instance asks for."""
    counts: dict[Resource, int] = {}
    for needs in instances:
        for key, count in needs.resources.items():
            counts[key] = max(counts.get(key, 0), count)
    for key in counts:
        given = _explicit(key, explicit)
        if given is not None:
            counts[key] = given
    return counts


def too_large(needs: Needs, explicit: Sequence[ExplicitCount]) -> str | None:
    """Why an instance can never run under the explicit counts (None: it can)."""
    for (name, device), count in sorted(needs.resources.items(), key=str):
        given = _explicit((name, device), explicit)
        if given is not None and count > given:
            where = "global" if device is GLOBAL else f"device {device}"
            return (
                f"resource '{name}' ({where}): the instance needs {count}, but "
                f"--rate-limit-resource gives {given}"
            )
    return None


def grants(contenders: Iterable[Contender], free: Mapping[Resource, int]) -> list[int]:
    """The contenders that may run now with `free` copies of each resource, best ranked first:
    fewest executions times priority, then the longest waiting."""
    left = dict(free)
    chosen: list[int] = []
    ranked = sorted(
        contenders,
        key=lambda c: (c.executions * c.needs.priority, c.waiting_since_ns, c.ident),
    )
    for contender in ranked:
        needs = contender.needs.resources
        fits = all(left.get(key, 0) >= count for key, count in needs.items())
        for key, count in needs.items():  # taken, or held back from those ranked below
            left[key] = left.get(key, 0) - count
        if fits:
            chosen.append(contender.ident)
    return chosen


def _explicit(key: Resource, explicit: Sequence[ExplicitCount]) -> int | None:
    name, device = key
    for given in explicit:
        if given.name == name and given.device is not None and given.device == device:
            return given.count
    for given in explicit:
        if given.name == name and given.device is None:
            return given.count
    return None
