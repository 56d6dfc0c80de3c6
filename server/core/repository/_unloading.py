"""`Unloading`: how a repository takes versions out of service: unloads, evictions to fit the
memory budget, the keep-alive's idle unloads, and replaced versions draining in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Sequence

from server.core.repository._budget import MemoryBudget, Resident, plan_room
from server.core.repository._directories import check_name
from server.core.repository._loader import unload_version
from server.core.repository._models import (
    UNLOADED,
    ModelEntry,
    ModelState,
    ModelVersion,
    VersionStatus,
)
from server.core.serving.ensemble import composing_models

_log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0  # how long a replaced or unloaded version may finish its requests


class Unloading:
    """The repository's unloads; the state they read is set and explained in
    `Repository.__init__`."""

    _budget: MemoryBudget | None
    _models: dict[str, ModelEntry]
    _loading_for: Counter[str]
    _locks: dict[str, asyncio.Lock]
    _draining: set[asyncio.Task[None]]
    _changes: int

    async def _make_room(
        self, name: str, fresh: Sequence[ModelVersion], replaced: Sequence[ModelVersion]
    ) -> None:
        """Fit freshly built versions under the budget, evicting idle models if allowed."""
        assert self._budget is not None
        used = sum(e.memory_bytes for e in self._models.values()) - sum(
            v.memory_bytes for v in replaced
        )
        # A loaded ensemble's composing models are in use even while idle, and evicting a model
        # that takes nothing (an ensemble) frees nothing: neither is a candidate.
        composing = self.composing()
        residents = [
            Resident(
                e.name,
                e.memory_bytes,
                e.last_used_ms,
                e.idle and e.name not in composing and e.memory_bytes > 0,
            )
            for e in self._models.values()
            if e.name != name and e.ready
        ]
        needed = sum(v.memory_bytes for v in fresh)
        for victim in plan_room(name, self._budget, residents, used, needed):
            await self._evict(self._models[victim.name], name)

    async def _evict(self, entry: ModelEntry, for_model: str) -> None:
        reason = (
            f"evicted (least recently used) to make room for '{for_model}' under the memory budget"
        )
        _log.warning("model '%s' %s (%d bytes)", entry.name, reason, entry.memory_bytes)
        await self._take_down(entry, reason)

    async def unload_idle(self, entry: ModelEntry, keep_alive_s: float) -> None:
        """The keep-alive's unload: the next request for the model loads it again."""
        if not entry.ready or not entry.idle:
            return
        reason = f"unloaded after {keep_alive_s:g} s idle (keep-alive); a request loads it again"
        _log.info("model '%s' %s", entry.name, reason)
        entry.idle_unloads += 1
        entry.idle_unloaded = True
        await self._take_down(entry, reason)

    def composing(self) -> set[str]:
        """The models a ready ensemble uses, or one being loaded (never unloaded under it)."""
        return {
            model
            for e in self._models.values()
            if e.ready and e.config is not None
            for model in composing_models(e.config)
        } | set(self._loading_for)

    async def _take_down(self, entry: ModelEntry, reason: str) -> None:
        old = entry.ready
        entry.ready = {}
        entry.evicted = True
        entry.statuses = [VersionStatus(v, ModelState.UNAVAILABLE, reason) for v in sorted(old)]
        await asyncio.gather(*(self._unload_version(v, DRAIN_TIMEOUT_S) for v in old.values()))

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Stop serving a model: new requests fail at once, accepted ones finish first.

        With `unload_dependents`, the ensembles that use the model are unloaded as well.
        """
        check_name(name)
        if unload_dependents:
            for user in list(self._models.values()):
                if user.config is not None and name in composing_models(user.config):
                    await self.unload(user.name)
        async with self._lock(name):
            entry = self._models.get(name)
            if entry is None or not entry.ready:
                return  # as Triton: unloading a model that is not loaded succeeds
            old = entry.ready
            entry.ready = {}
            entry.statuses = [VersionStatus(v, ModelState.UNLOADING) for v in sorted(old)]
            await asyncio.gather(*(self._unload_version(v, DRAIN_TIMEOUT_S) for v in old.values()))
            entry.statuses = [
                VersionStatus(v, ModelState.UNAVAILABLE, UNLOADED) for v in sorted(old)
            ]
            _log.info("unloaded model '%s'", name)

    async def unload_all(self, timeout_s: float) -> None:
        versions = [v for entry in self._models.values() for v in entry.ready.values()]
        for entry in self._models.values():
            entry.ready = {}
        await asyncio.gather(*(self._unload_version(v, timeout_s) for v in versions))
        await asyncio.gather(*self._draining)

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _unload_version(self, version: ModelVersion, timeout_s: float) -> None:
        try:
            await unload_version(version, timeout_s)
        finally:
            self._changes += 1

    def _retire(self, versions: Iterable[ModelVersion]) -> None:
        """Drain and close replaced versions in the background."""
        for version in versions:
            task = asyncio.create_task(self._unload_version(version, DRAIN_TIMEOUT_S))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
