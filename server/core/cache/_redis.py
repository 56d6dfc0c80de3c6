"""`RedisCache`: Triton's `redis` cache, a Redis server that replicas share.

A Redis that does not answer never fails a request: the request counts as a miss and runs. The
first failure is logged once for the outage; for `RETRY_S` after any failure requests do not
wait on Redis at all, then the next one tries again (the client opens a new connection), and
the first answer ends the outage with a line in the log.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from batching import TensorMap
from server.contract.errors import ConfigError
from server.core.cache._entry import CacheEntryError, decode_entry, encode_entry
from server.core.cache._local import CacheCounters
from server.core.cache._spec import RedisCacheSpec

_log = logging.getLogger(__name__)

RETRY_S = 1.0  # after a failure, how long requests skip Redis before one tries again
KEY_PREFIX = "convoy:response:"


class RedisCache:
    """One client (a pool of connections) for every model's entries; keys never expire (Redis's
    own maxmemory policy bounds them)."""

    def __init__(self, spec: RedisCacheSpec) -> None:
        try:  # an extra: only this cache needs the package
            from redis.exceptions import RedisError
        except ImportError:
            raise ConfigError(
                "--cache-config redis needs the redis package: pip install 'convoy[redis]'"
            ) from None
        self.spec = spec
        # What the client raises when Redis is down, slow or gone (never the request's fault).
        self._errors: tuple[type[Exception], ...] = (RedisError, OSError, TimeoutError)
        self.counters = CacheCounters()
        self._client: Any = None
        self._retry_at_s = 0.0  # monotonic seconds; later than now: Redis is out
        self._out = False

    async def start(self) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        spec = self.spec
        pool = BlockingConnectionPool(
            host=spec.host,
            port=spec.port,
            username=spec.user,
            password=spec.password,
            db=spec.db,
            socket_connect_timeout=_seconds(spec.connect_timeout_ms),
            socket_timeout=_seconds(spec.socket_timeout_ms),
            max_connections=spec.pool_size,
            timeout=_seconds(spec.wait_timeout_ms),
            retry=Retry(NoBackoff(), 0),  # an outage is handled here, not retried per command
        )
        self._client = Redis(connection_pool=pool)
        _log.info("response cache: redis at %s", spec.address)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose(close_connection_pool=True)

    async def lookup(self, key: bytes) -> TensorMap | None:
        if not self._reachable():
            return None
        try:
            entry = await self._client.get(KEY_PREFIX + key.hex())
        except self._errors as exc:
            self._failed(exc)
            return None
        self._answered()
        if entry is None:
            return None
        try:
            return decode_entry(entry)
        except CacheEntryError as exc:
            _log.warning("response cache: entry %s in redis is unusable: %s", key.hex(), exc)
            return None

    async def insert(self, key: bytes, outputs: TensorMap) -> None:
        if not self._reachable():
            return
        try:
            await self._client.set(KEY_PREFIX + key.hex(), encode_entry(outputs))
        except self._errors as exc:
            self._failed(exc)
            return
        self._answered()

    def _reachable(self) -> bool:
        return time.monotonic() >= self._retry_at_s

    def _failed(self, exc: Exception) -> None:
        self._retry_at_s = time.monotonic() + RETRY_S
        if not self._out:
            self._out = True
            _log.warning(
                "response cache: redis at %s does not answer (%s); requests run uncached, "
                "trying again every %.0f s",
                self.spec.address,
                exc or type(exc).__name__,
                RETRY_S,
            )

    def _answered(self) -> None:
        if self._out:
            self._out = False
            _log.warning("response cache: redis at %s answers again", self.spec.address)


def _seconds(ms: int) -> float | None:
    return ms / 1000 if ms > 0 else None  # 0: wait forever, as Triton
