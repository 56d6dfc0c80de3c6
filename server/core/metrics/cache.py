"""The response cache's metric families under Triton's names: per model (hits, misses and their
cumulative microseconds, for versions that use the cache) and for the cache itself (the gauges
Triton's local cache reports: entries, lookups, hits, misses, evictions, durations, utilization).
"""

from __future__ import annotations

from collections.abc import Callable

from server.core.cache import CacheCounters
from server.core.repository import ModelVersion

# (name, help, value of one version, whether it is a duration)
PER_MODEL_FAMILIES: tuple[tuple[str, str, Callable[[ModelVersion], float], bool], ...] = (
    (
        "nv_cache_num_hits_per_model",
        "Number of cache hits per model",
        lambda v: v.stats.cache_hit.count,
        False,
    ),
    (
        "nv_cache_num_misses_per_model",
        "Number of cache misses per model",
        lambda v: v.stats.cache_miss.count,
        False,
    ),
    (
        "nv_cache_hit_duration_per_model",
        "Total cache hit duration per model, in microseconds",
        lambda v: v.stats.cache_hit.total_ns // 1000,
        True,
    ),
    (
        "nv_cache_miss_duration_per_model",
        "Total cache miss (lookup and insertion) duration per model, in microseconds",
        lambda v: v.stats.cache_miss.total_ns // 1000,
        True,
    ),
)

# (name, help, value of the cache's counters): gauges
CACHE_FAMILIES: tuple[tuple[str, str, Callable[[CacheCounters], float]], ...] = (
    ("nv_cache_num_entries", "Number of responses stored in response cache", lambda c: c.entries),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache", lambda c: c.lookups),
    ("nv_cache_num_hits", "Number of cache hits in response cache", lambda c: c.hits),
    ("nv_cache_num_misses", "Number of cache misses in response cache", lambda c: c.misses),
    (
        "nv_cache_num_evictions",
        "Number of cache evictions in response cache",
        lambda c: c.evictions,
    ),
    (
        "nv_cache_lookup_duration",
        "Total cache lookup duration (hit and miss), in microseconds",
        lambda c: c.lookup_ns // 1000,
    ),
    (
        "nv_cache_insertion_duration",
        "Total cache insertion duration, in microseconds",
        lambda c: c.insert_ns // 1000,
    ),
    (
        "nv_cache_util",
        "Cache utilization [0.0 - 1.0]",
        lambda c: c.used_bytes / c.capacity_bytes if c.capacity_bytes else 0.0,
    ),
)

# Known only of a cache in this process (Redis keeps its own).
ENTRY_FAMILIES = {"nv_cache_num_entries", "nv_cache_num_evictions", "nv_cache_util"}
