"""`VersionCache`: one model version's view of the server's response cache, which the request
path asks before the scheduler and fills after a successful execution; `version_cache` decides
at load time whether a version gets one (warning where a config asks for what cannot be)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from batching import Parameters, TensorMap
from proto import model_config_pb2 as mc
from server.contract.datatypes import wire_name
from server.core.cache._key import request_key, version_prefix
from server.core.cache._local import CacheCounters, LocalCache
from server.core.cache._redis import RedisCache
from server.core.cache._spec import CacheSpec, LocalCacheSpec

_log = logging.getLogger(__name__)


class ResponseCache(Protocol):
    """The server's one cache, shared by every model (`LocalCache`, `RedisCache`)."""

    @property
    def counters(self) -> CacheCounters: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def lookup(self, key: bytes) -> TensorMap | None:
        """The outputs stored under `key` (read-only arrays), or None."""
        ...

    async def insert(self, key: bytes, outputs: TensorMap) -> None:
        """Store host outputs under `key`; an entry it cannot take is left out silently."""
        ...


@dataclass(frozen=True, slots=True)
class Lookup:
    """A request's lookup: its key, what was found (None: a miss) and how long it took."""

    key: bytes
    outputs: TensorMap | None
    lookup_ns: int


@dataclass(frozen=True, slots=True)
class VersionCache:
    """The cache as one version uses it: keys start from its name and version."""

    cache: ResponseCache
    prefix: bytes  # version_prefix(name, version, content)
    datatypes: Mapping[str, str]  # input name -> wire data type

    async def lookup(
        self, arrays: Mapping[str, npt.NDArray[Any]], parameters: Parameters
    ) -> Lookup | None:
        """The request's lookup; None when it cannot be cached (an input on a device)."""
        started_ns = time.monotonic_ns()
        key = request_key(self.prefix, arrays, self.datatypes, parameters)
        if key is None:
            return None
        found = await self.cache.lookup(key)
        lookup_ns = time.monotonic_ns() - started_ns
        counters = self.cache.counters
        counters.lookups += 1
        counters.lookup_ns += lookup_ns
        if found is None:
            counters.misses += 1
        else:
            counters.hits += 1
        return Lookup(key, found, lookup_ns)

    async def insert(self, lookup: Lookup, outputs: TensorMap) -> int:
        """Store a missed request's outputs; the miss's time (lookup and insertion) in ns.
        Outputs on a device are not stored, as Triton."""
        started_ns = time.monotonic_ns()
        if all(type(array) is np.ndarray for array in outputs.values()):
            await self.cache.insert(lookup.key, outputs)
        insert_ns = time.monotonic_ns() - started_ns
        self.cache.counters.insert_ns += insert_ns
        return lookup.lookup_ns + insert_ns


def version_cache(
    cache: ResponseCache | None, config: mc.ModelConfig, version: int, content: bytes
) -> VersionCache | None:
    """The cache a loaded version uses: None unless its config enables `response_cache`, the
    server has a cache, and the model is neither decoupled nor a sequence model. `content`
    names what its answers depend on (its keys start from it)."""
    if not config.response_cache.enable:
        return None
    where = f"model '{config.name}' version {version}"
    if cache is None:
        _log.warning(
            "%s enables response_cache, but the server has no cache (--cache-config): its "
            "responses are not cached",
            where,
        )
        return None
    if config.model_transaction_policy.decoupled:
        _log.warning("%s is decoupled: decoupled models are never cached", where)
        return None
    if config.WhichOneof("scheduling_choice") == "sequence_batching":
        _log.warning("%s has sequence_batching: sequence models are never cached", where)
        return None
    datatypes = {tensor.name: wire_name(tensor.data_type) for tensor in config.input}
    return VersionCache(cache, version_prefix(config.name, version, content), datatypes)


def open_cache(spec: CacheSpec | None) -> ResponseCache | None:
    """The cache a spec describes (None: none); `start()` it on the event loop."""
    if spec is None:
        return None
    if isinstance(spec, LocalCacheSpec):
        return LocalCache(spec.size_bytes)
    return RedisCache(spec)
