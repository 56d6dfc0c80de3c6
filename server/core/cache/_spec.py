"""`--cache-config` values (Triton's `<cache>,<key>=<value>`, repeatable) as one typed spec:
`local` (an in-memory LRU bounded in bytes) or `redis` (a Redis server shared by replicas)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.contract.errors import ConfigError
from server.contract.numbers import is_digits

CACHE_NAMES = ("local", "redis")


@dataclass(frozen=True, slots=True)
class LocalCacheSpec:
    """Triton's `local` cache."""

    size_bytes: int  # > 0: outputs (and keys) stored, at most; the oldest used go first


@dataclass(frozen=True, slots=True)
class RedisCacheSpec:
    """Triton's `redis` cache keys, with Convoy's defaults where Triton waits forever."""

    host: str
    port: int
    user: str | None = None  # None: Redis's `default` user
    password: str | None = None
    db: int = 0
    connect_timeout_ms: int = 1000  # a dead host costs a request at most this (then a miss)
    socket_timeout_ms: int = 1000  # the longest wait for one answer
    pool_size: int = 16  # connections kept; a request waits for a free one
    wait_timeout_ms: int = 100  # the longest wait for a free connection

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


CacheSpec = LocalCacheSpec | RedisCacheSpec

_REDIS_INTS = ("port", "db", "connect_timeout", "socket_timeout", "pool_size", "wait_timeout")
_REDIS_KEYS = ("host", "user", "password", *_REDIS_INTS)


def parse_cache_config(values: Sequence[str]) -> CacheSpec | None:
    """The cache the `--cache-config` values describe (None: no value, no cache); a wrong one is
    a ConfigError naming it."""
    if not values:
        return None
    name = ""
    settings: dict[str, str] = {}
    for value in values:
        cache, _, setting = value.partition(",")
        key, _, raw = setting.partition("=")
        if cache not in CACHE_NAMES or not key or not raw:
            raise ConfigError(
                f"--cache-config '{value}': expected <cache>,<key>=<value> with <cache> one of "
                f"{', '.join(CACHE_NAMES)} (e.g. local,size=1048576)"
            )
        if name and cache != name:
            raise ConfigError(
                f"--cache-config '{value}': one cache at a time, and '{name}' is configured"
            )
        name = cache
        settings[key] = raw
    if name == "local":
        return _local(settings)
    return _redis(settings)


def _local(settings: dict[str, str]) -> LocalCacheSpec:
    unknown = sorted(set(settings) - {"size"})
    if unknown:
        raise ConfigError(f"--cache-config local: unknown key(s) {unknown}; it takes size only")
    if "size" not in settings:
        raise ConfigError("--cache-config local: size=BYTES is required")
    size = _int("local", "size", settings["size"])
    if size <= 0:
        raise ConfigError(f"--cache-config local,size={size}: the size must be positive")
    return LocalCacheSpec(size)


def _redis(settings: dict[str, str]) -> RedisCacheSpec:
    unknown = sorted(set(settings) - set(_REDIS_KEYS))
    if unknown:
        raise ConfigError(
            f"--cache-config redis: unknown key(s) {unknown}; known: {', '.join(_REDIS_KEYS)}"
        )
    missing = [key for key in ("host", "port") if key not in settings]
    if missing:
        raise ConfigError(f"--cache-config redis: {' and '.join(missing)} required")
    numbers = {key: _int("redis", key, settings[key]) for key in _REDIS_INTS if key in settings}
    if not 0 < numbers["port"] < 65536:
        raise ConfigError(f"--cache-config redis,port={numbers['port']}: not a TCP port")
    if numbers.get("pool_size", 1) < 1:
        raise ConfigError("--cache-config redis,pool_size: at least 1")
    defaults = RedisCacheSpec("", 0)
    return RedisCacheSpec(
        host=settings["host"],
        port=numbers["port"],
        user=settings.get("user"),
        password=settings.get("password"),
        db=numbers.get("db", defaults.db),
        connect_timeout_ms=numbers.get("connect_timeout", defaults.connect_timeout_ms),
        socket_timeout_ms=numbers.get("socket_timeout", defaults.socket_timeout_ms),
        pool_size=numbers.get("pool_size", defaults.pool_size),
        wait_timeout_ms=numbers.get("wait_timeout", defaults.wait_timeout_ms),
    )


def _int(cache: str, key: str, raw: str) -> int:
    if not is_digits(raw):
        raise ConfigError(f"--cache-config {cache},{key}={raw}: expected a non-negative integer")
    return int(raw)
