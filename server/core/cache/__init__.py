"""The response cache: `--cache-config` parsed into a spec, the local LRU and the Redis cache
behind one protocol, request keys, and each model version's view of it."""

from server.core.cache._entry import CacheEntryError, decode_entry, encode_entry
from server.core.cache._key import request_key, version_prefix
from server.core.cache._local import CacheCounters, LocalCache
from server.core.cache._redis import RedisCache
from server.core.cache._spec import (
    CacheSpec,
    LocalCacheSpec,
    RedisCacheSpec,
    parse_cache_config,
)
from server.core.cache._version import (
    Lookup,
    ResponseCache,
    VersionCache,
    open_cache,
    version_cache,
)

__all__ = [
    "CacheCounters",
    "CacheEntryError",
    "CacheSpec",
    "LocalCache",
    "LocalCacheSpec",
    "Lookup",
    "RedisCache",
    "RedisCacheSpec",
    "ResponseCache",
    "VersionCache",
    "decode_entry",
    "encode_entry",
    "open_cache",
    "parse_cache_config",
    "request_key",
    "version_cache",
    "version_prefix",
]
