"""Whether the repository's models fit in memory together, by the seed's rule: each instance
holds its own weights plus one batch at max_batch_size (`footprint_bytes`, the estimate the
server's memory budget counts), and 20% more for batch peaks, against the usable memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from server.tools._units import format_bytes as _size
from server.tools.doctor._findings import Check, Finding, Severity

PEAK_MARGIN = 1.2  # the seed's 20% margin for batch peaks


@dataclass(frozen=True, slots=True)
class Usage:
    """One model's estimated memory (all the versions it would serve) and where it lives."""

    model: str
    path: str  # its config.pbtxt, where instance counts and max_batch_size are set
    bytes: int
    gpu_copies: int  # instances holding the weights on a GPU


def needed_bytes(footprint_bytes: int) -> int:
    return math.ceil(footprint_bytes * PEAK_MARGIN)


def check_memory(usages: Sequence[Usage], usable_bytes: int, budget_source: str) -> list[Finding]:
    """A finding for each model that cannot fit even alone, one when they do not fit together
    (which fit in load order, which would not), and a note on each model with several copies
    of its weights on GPUs."""
    findings = []
    for usage in usages:
        if usage.gpu_copies > 1:
            findings.append(
                Finding(
                    Severity.INFO,
                    Check.MEMORY,
                    usage.model,
                    f"model '{usage.model}': {usage.gpu_copies} GPU instances each hold a copy "
                    f"of the weights ({_size(usage.bytes)} in all with their batches)",
                    usage.path,
                    "one instance per GPU is often as fast when the dynamic batcher fills its "
                    "batches; measure with convoy profile --instances 1,2",
                )
            )
        if needed_bytes(usage.bytes) > usable_bytes:
            findings.append(
                Finding(
                    Severity.ERROR,
                    Check.MEMORY,
                    usage.model,
                    f"model '{usage.model}' needs {_size(needed_bytes(usage.bytes))} "
                    f"({_size(usage.bytes)} of instances x (weights + one max batch), +20% for "
                    f"batch peaks) but {budget_source} gives {_size(usable_bytes)}",
                    usage.path,
                    "lower its instance count or max_batch_size, or raise --memory-budget",
                )
            )
    total = sum(usage.bytes for usage in usages)
    if needed_bytes(total) <= usable_bytes:
        return findings
    fit, left, used = [], [], 0
    for usage in usages:  # in load order: the first ones would take the memory
        if needed_bytes(used + usage.bytes) <= usable_bytes:
            fit.append(usage.model)
            used += usage.bytes
        else:
            left.append(usage.model)
    findings.append(
        Finding(
            Severity.ERROR,
            Check.MEMORY,
            "",
            f"together the models need {_size(needed_bytes(total))} (instances x (weights + "
            f"one max batch), +20% for batch peaks) but {budget_source} gives "
            f"{_size(usable_bytes)}: {', '.join(fit) or 'none'} fit ({_size(needed_bytes(used))})"
            f"; {', '.join(left)} would not fit beside them",
            "",
            "raise --memory-budget, lower instance counts or max_batch_size, serve some models "
            "on another server, or let the server evict idle ones (--model-eviction lru "
            "--lazy-load)",
        )
    )
    return findings
