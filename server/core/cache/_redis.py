"""`RedisCache`: Triton's `redis` cache, a Redis server that replicas share.

A Redis that does not answer never fails a request: the request counts as a miss and runs. The
first failure begins an outage, logged once: from then on no request waits on Redis at all, and
one probe of the cache's own asks Redis every `RETRY_S` (a PING on a new connection); its first
answer ends the outage, with a line in the log. Only the requests already waiting on Redis when
it stopped answering wait out their timeout: before the probe, every request that came after
each retry interval tried Redis again, and a hung Redis (stopped, or a network partition) held
each such request for a whole socket timeout, over and over for the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from batching import TensorMap
from server.contract.errors import ConfigError
from server.core.cache._entry import CacheEntryError, decode_entry, encode_entry
from server.core.cache._local import CacheCounters
from server.core.cache._spec import RedisCacheSpec

_log = logging.getLogger(__name__)

RETRY_S = 1.0  # during an outage, how often the probe asks Redis whether it answers again
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
        # Set while Redis is out: the task that asks it again every RETRY_S until it answers.
        self._probe: asyncio.Task[None] | None = None

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
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        if self._client is not None:
            await self._client.aclose(close_connection_pool=True)

    async def lookup(self, key: bytes) -> TensorMap | None:
        if self._probe is not None:  # out: the request runs uncached
            return None
        try:
            entry = await self._client.get(KEY_PREFIX + key.hex())
        except self._errors as exc:
            self._failed(exc)
            return None
        if entry is None:
            return None
        try:
            return decode_entry(entry)
        except CacheEntryError as exc:
            _log.warning("response cache: entry %s in redis is unusable: %s", key.hex(), exc)
            return None

    async def insert(self, key: bytes, outputs: TensorMap) -> None:
        if self._probe is not None:
            return
        try:
            await self._client.set(KEY_PREFIX + key.hex(), encode_entry(outputs))
        except self._errors as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """A command failed: an outage begins, unless one is already on (requests that were
        waiting on Redis together fail together)."""
        if self._probe is not None:
            return
        _log.warning(
            "response cache: redis at %s does not answer (%s); requests run uncached, "
            "trying again every %.0f s",
            self.spec.address,
            exc or type(exc).__name__,
            RETRY_S,
        )
        self._probe = asyncio.get_running_loop().create_task(self._until_it_answers())

    async def _until_it_answers(self) -> None:
        """The outage's probe: a PING every RETRY_S, each within the client's socket timeout
        (or RETRY_S where it waits forever), until one is answered."""
        limit_s = _seconds(self.spec.socket_timeout_ms) or RETRY_S
        while True:
            await asyncio.sleep(RETRY_S)
            try:
                await asyncio.wait_for(self._client.ping(), limit_s)
            except self._errors:  # TimeoutError among them (wait_for's too)
                continue
            self._probe = None
            _log.warning("response cache: redis at %s answers again", self.spec.address)
            return


def _seconds(ms: int) -> float | None:
    return ms / 1000 if ms > 0 else None  # 0: wait forever, as Triton
