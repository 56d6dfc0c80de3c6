"""`LocalCache`: Triton's `local` cache, an in-memory LRU bounded in bytes, shared by every model.

Entries are read-only copies of the outputs (a batch's outputs are views of one buffer; a copy
keeps only this request's bytes alive). An entry counts its key and its outputs' bytes; one
larger than the whole cache is not stored. Owned by the event loop: no locks.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from batching import TensorMap


@dataclass(slots=True)
class CacheCounters:
    """What a cache did since the start, for Triton's nv_cache_* gauges; read by scrapes."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0  # entries dropped to make room (local cache)
    lookup_ns: int = 0  # total time of lookups, hits and misses
    insert_ns: int = 0  # total time of insertions
    entries: int = 0  # entries held now (local cache)
    used_bytes: int = 0  # bytes held now (local cache)
    capacity_bytes: int = 0  # 0: unknown (a cache outside the process)
    counts_entries: bool = field(default=False)  # whether entries, bytes and evictions are known


class LocalCache:
    """Least recently used entries go first when an insertion needs room."""

    def __init__(self, capacity_bytes: int) -> None:
        self.counters = CacheCounters(capacity_bytes=capacity_bytes, counts_entries=True)
        self._entries: OrderedDict[bytes, tuple[TensorMap, int]] = OrderedDict()

    async def start(self) -> None:
        pass  # nothing to connect to

    async def close(self) -> None:
        self._entries.clear()

    async def lookup(self, key: bytes) -> TensorMap | None:
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        return found[0]

    async def insert(self, key: bytes, outputs: TensorMap) -> None:
        if key in self._entries:
            return  # an equal request that ran at the same time stored it first
        size = len(key) + sum(_size_bytes(array) for array in outputs.values())
        counters = self.counters
        if size > counters.capacity_bytes:
            return
        while counters.used_bytes + size > counters.capacity_bytes:
            _, (_, freed) = self._entries.popitem(last=False)
            counters.used_bytes -= freed
            counters.evictions += 1
        self._entries[key] = ({name: _frozen(a) for name, a in outputs.items()}, size)
        counters.used_bytes += size
        counters.entries = len(self._entries)


def _size_bytes(array: npt.NDArray[Any]) -> int:
    if array.dtype != np.object_:
        return int(array.nbytes)
    # BYTES: each element's bytes and its 4-byte length, as on the wire.
    return sum(4 + len(x if isinstance(x, bytes) else str(x).encode()) for x in array.flat)


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy
