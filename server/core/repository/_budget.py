"""The memory budget: each version's footprint, and which idle models to evict (LRU) for room."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from backends import cuda_memory_total_bytes
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG
from server.contract.errors import LOAD_FAILED

AUTO_RAM_SHARE = 0.5  # `--memory-budget auto` on CPU: this share of the machine's RAM
AUTO_DEVICE_SHARE = 0.5  # `--memory-budget auto` with GPUs: this share of their memory
_BYTES_ELEMENT_ESTIMATE = 64  # bytes per BYTES element when estimating activations


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """How many bytes loaded models may take, and whether idle ones are evicted for room."""

    limit_bytes: int
    evict_lru: bool = False


@dataclass(frozen=True, slots=True)
class Resident:
    """What eviction needs to know about one loaded model."""

    name: str
    bytes: int
    last_used_ms: int  # last finished request (or load) in wall-clock ms
    idle: bool  # no request queued or running: only idle models may be evicted


def auto_limit_bytes(cuda_total_bytes: int | None = None) -> int:
    """`auto`: a share of the GPUs' memory (cudaMemGetInfo totals) where models run on CUDA,
    else a share of physical RAM. `cuda_total_bytes` None asks the devices; 0 means none."""
    if cuda_total_bytes is None:
        cuda_total_bytes = cuda_memory_total_bytes()
    if cuda_total_bytes > 0:
        return int(cuda_total_bytes * AUTO_DEVICE_SHARE)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * AUTO_RAM_SHARE)


def footprint_bytes(config: mc.ModelConfig, model_file_bytes: int, instances: int) -> int:
    """The seed's estimate: weights per instance plus a batch at max_batch_size of every input
    and output per instance (variable dimensions count 1)."""
    batch = max(config.max_batch_size, 1)
    io_bytes = 0
    tensors: list[mc.ModelInput | mc.ModelOutput] = [*config.input, *config.output]
    for tensor in tensors:
        datatype = BY_CONFIG.get(tensor.data_type)
        size = datatype.item_size_bytes if datatype and datatype.item_size_bytes else 0
        elements = batch
        for dim in tensor.dims:
            elements *= max(dim, 1)
        io_bytes += elements * (size or _BYTES_ELEMENT_ESTIMATE)
    return (model_file_bytes + io_bytes) * instances


def choose_evictions(
    residents: Sequence[Resident], needed_bytes: int, free_bytes: int
) -> list[Resident] | None:
    """The least recently used idle models to unload so that `needed_bytes` fit; None when even
    evicting every idle model would not make room."""
    if needed_bytes <= free_bytes:
        return []
    chosen = []
    for resident in sorted(residents, key=lambda r: r.last_used_ms):
        if not resident.idle:
            continue
        chosen.append(resident)
        free_bytes += resident.bytes
        if needed_bytes <= free_bytes:
            return chosen
    return None


def plan_room(
    model: str,
    budget: MemoryBudget,
    residents: Sequence[Resident],
    used_bytes: int,
    needed_bytes: int,
) -> list[Resident]:
    """The idle models to evict so that `model`'s `needed_bytes` fit under `budget`, with
    `used_bytes` taken by the `residents` (the other loaded models); ModelLoadFailedError when
    they cannot fit (eviction off, or too little would be freed)."""
    limit = budget.limit_bytes
    free = limit - used_bytes
    if budget.evict_lru:
        victims = choose_evictions(residents, needed_bytes, free)
    else:
        victims = [] if needed_bytes <= free else None
    if victims is None:
        raise LOAD_FAILED(
            model=model,
            reason=f"it needs {needed_bytes} bytes, but only {max(free, 0)} of the "
            f"{limit}-byte memory budget are free ({used_bytes} bytes used by {len(residents)} "
            "other model(s))"
            + ("; no idle model can be evicted to make room" if budget.evict_lru else ""),
        )
    return victims
