"""`Loading`: how a repository puts models in service: each found in its directories (an
ensemble's composing models first), built beside the versions serving, fitted under the memory
budget and swapped in; again on demand for an evicted model, and when the directories change."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from batching import BatchPolicy, RateLimiter
from proto import model_config_pb2 as mc
from server.contract.errors import LOAD_FAILED, LOAD_NOT_POLLED, ConfigError, ModelLoadFailedError
from server.core.cache import ResponseCache
from server.core.repository._autocomplete import AutoComplete
from server.core.repository._config import read_config
from server.core.repository._content import keep_content, refresh_ensembles
from server.core.repository._directories import check_name, directory_stamp, write_files
from server.core.repository._loader import Built, Peers, build_model
from server.core.repository._models import ModelEntry, ModelState, ModelVersion, VersionStatus
from server.core.repository._sources import Sources
from server.core.repository._unloading import Unloading
from server.core.serving.ensemble import composing_models, is_ensemble

_log = logging.getLogger(__name__)


class Loading(Unloading):
    """The repository's loads; the state they read is set and explained in
    `Repository.__init__`."""

    _sources: Sources
    _requests_classified: bool
    _config_name: str | None
    _backend_directory: Path | None
    _load_retries: int
    _latency_histograms: bool
    _cache: ResponseCache | None
    _limiter: RateLimiter | None
    _completion: AutoComplete
    _load_concurrency: int
    _lazy: dict[str, asyncio.Task[None]]
    _peers: Peers

    if TYPE_CHECKING:  # `Repository`'s, beside its other answers on what serves

        def is_ready(self, name: str, version: str = "") -> bool: ...

    def scan(self) -> dict[str, Path]:
        """Every model directory of every repository; a name in two repositories is an error.
        A cloud repository's models are those of its last sync."""
        return self._sources.scan()

    def unavailable(self) -> list[tuple[str, str]]:
        """Each cloud repository whose last sync failed, and why."""
        return self._sources.unavailable()

    async def load_many(self, names: Iterable[str] | None = None) -> None:
        """Load the named models (all found when None), in parallel with a bound; failures are
        recorded in the index and never stop the rest."""
        await self._sources.sync(None if names is None else set(names))
        found = self.scan()
        wanted = sorted(found) if names is None else sorted(set(names))
        gate = asyncio.Semaphore(self._load_concurrency)

        async def load(name: str) -> None:
            async with gate:
                path = found.get(name)
                if path is None:
                    _log.error("failed to load '%s', failed to poll from model repository", name)
                    return
                with contextlib.suppress(ModelLoadFailedError):  # in the index, and logged
                    await self._load_from(name, path)

        await asyncio.gather(*(load(name) for name in wanted))

    async def load(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load a model, or reload it if loaded; raises ModelLoadFailedError with the reasons.

        `override` replaces config.pbtxt; `files` ("<version>/<name>" -> bytes) replace the
        model's directory for this load. A reload that fails leaves the old versions serving.
        """
        check_name(name)
        if files:
            if override is None:
                raise LOAD_NOT_POLLED(
                    model=name,
                    reason="load parameter 'config' must be specified for model file override",
                )
            async with self._lock(name):
                with tempfile.TemporaryDirectory(prefix="convoy-") as scratch:
                    path = write_files(name, Path(scratch) / name, files)
                    await self._build_and_swap(name, path, override, stamp=())
            return
        await self._sources.sync((name,))
        found = self.scan().get(name)
        stale = self._sources.stale(found)
        if stale is not None:  # its cloud repository (or, for a model not found, one) failed
            raise LOAD_NOT_POLLED(model=name, reason=stale)
        if found is None:
            raise LOAD_NOT_POLLED(model=name, reason="model not found in any model repository")
        await self._load_from(name, found, override)

    async def _load_from(
        self,
        name: str,
        path: Path,
        override: mc.ModelConfig | None = None,
        stamp: tuple[object, ...] | None = None,
        chain: tuple[str, ...] = (),
    ) -> None:
        """(Re)load a model from its directory in a repository; `stamp` if already taken.

        An ensemble's composing models are loaded first when they are not ready, and are in
        use from then on (`composing`): an idle one is not unloaded while the ensemble loads.
        """
        composing = self._composing_of(path, override)
        self._loading_for.update(composing)
        try:
            await self._load_composing(name, composing, chain)
            async with self._lock(name):
                stamp = directory_stamp(path) if stamp is None else stamp
                await self._build_and_swap(name, path, override, stamp)
        finally:
            self._loading_for -= Counter(composing)  # (a name that reaches 0 leaves)

    def _composing_of(self, path: Path, override: mc.ModelConfig | None) -> list[str]:
        """The models an ensemble's config names (none for another model, or an unreadable
        config, which the build reports)."""
        try:
            config = override if override is not None else read_config(path, self._config_name)
        except (ConfigError, OSError):
            return []
        return composing_models(config) if config is not None and is_ensemble(config) else []

    async def _load_composing(
        self, name: str, composing: list[str], chain: tuple[str, ...]
    ) -> None:
        if not composing:
            return
        await self._sources.sync(composing)
        found = self.scan()
        for model in composing:
            if model in chain or model == name or self.is_ready(model) or model not in found:
                continue  # a cycle or an unknown model: the ensemble's plan names it
            with contextlib.suppress(ModelLoadFailedError):  # in the index, and logged
                await self._load_from(model, found[model], chain=(*chain, name))

    async def _build_and_swap(
        self, name: str, path: Path, override: mc.ModelConfig | None, stamp: tuple[object, ...]
    ) -> None:
        entry = self._models.get(name)
        if entry is None:
            entry = self._models[name] = ModelEntry(name, path)
        if not entry.ready:
            entry.statuses = [VersionStatus(None, ModelState.LOADING)]
        built = await self._build(name, path, override, entry.ready)
        for built_version in built.ready.values():
            await keep_content(built_version, path, self._loaded, self._cache)
        if built.failures and entry.ready:
            entry.failed_stamp = stamp
            reason = "; ".join(built.failures)
            _log.error(
                "reload of model '%s' failed, the loaded versions keep serving: %s", name, reason
            )
            self._retire(v for v in built.ready.values() if v not in entry.ready.values())
            raise LOAD_FAILED(model=name, reason=reason)
        replaced = [v for k, v in entry.ready.items() if built.ready.get(k) is not v]
        if self._budget is not None:
            fresh = [v for v in built.ready.values() if v not in entry.ready.values()]
            try:
                await self._make_room(name, fresh, replaced)
            except ModelLoadFailedError:
                self._retire(fresh)
                raise
        entry.path = path
        entry.ready = built.ready
        entry.statuses = built.statuses
        entry.config = built.ready[max(built.ready)].config if built.ready else None
        entry.stamp, entry.failed_stamp = stamp, ()
        entry.loaded_ms, entry.evicted = time.time_ns() // 1_000_000, False
        entry.idle_unloaded = False
        every = (v for e in self._models.values() for v in e.ready.values())
        refresh_ensembles(name, every, self._loaded, self._cache)
        self._changes += 1
        self._retire(replaced)
        if entry.config is not None and not self._requests_classified:
            _warn_unclassified(entry.config)
        if built.failures:
            entry.failed_stamp = stamp
            reason = "; ".join(built.failures)
            _log.error("model '%s' is unavailable: %s", name, reason)
            raise LOAD_FAILED(model=name, reason=reason)

    def _loaded(self, name: str) -> list[ModelVersion]:
        entry = self._models.get(name)
        return [] if entry is None else [entry.ready[v] for v in sorted(entry.ready)]

    async def _build(
        self,
        name: str,
        path: Path,
        override: mc.ModelConfig | None,
        current: Mapping[int, ModelVersion],
    ) -> Built:
        """build_model, tried again up to --model-load-retry-count times while a version
        fails; the versions a failed try built are let go before the next."""

        async def build() -> Built:
            return await build_model(
                name,
                path,
                self._peers,
                override,
                current,
                completion=self._completion,
                limiter=self._limiter,
                config_name=self._config_name,
                latency_histograms=self._latency_histograms,
                backend_directory=self._backend_directory,
            )

        built = await build()
        for retry in range(1, self._load_retries + 1):
            if not built.failures:
                break
            reason = "; ".join(built.failures)
            _log.warning(
                "load of model '%s' failed, retry %d of %d: %s",
                name,
                retry,
                self._load_retries,
                reason,
            )
            self._retire(v for v in built.ready.values() if v not in current.values())
            built = await build()
        return built

    async def ensure_loaded(self, name: str) -> None:
        """Load an evicted model again on demand (once, however many requests ask)."""
        task = self._lazy.get(name)
        if task is None:
            task = asyncio.create_task(self._reload_evicted(name))
            self._lazy[name] = task
            task.add_done_callback(lambda _: self._lazy.pop(name, None))
        await asyncio.shield(task)

    async def _reload_evicted(self, name: str) -> None:
        entry = self._models.get(name)
        if entry is not None and entry.evicted and not entry.ready:
            _log.info("loading evicted model '%s' on demand", name)
            started_ns = time.monotonic_ns()
            await self.load(name)
            entry.cold_starts += 1
            entry.cold_start_ns += time.monotonic_ns() - started_ns

    async def poll(self) -> None:
        """Apply what changed on disk (a cloud repository's copy synced first): models added,
        removed or with changed files."""
        await self._sources.sync()
        found = self.scan()
        for name in sorted(set(self._models) - set(found)):
            await self.unload(name)
            self._models.pop(name, None)
        for name, path in sorted(found.items()):
            entry = self._models.get(name)
            stamp = directory_stamp(path)
            if entry is not None and stamp in (entry.stamp, entry.failed_stamp):
                continue  # unchanged, or the same files that failed last time
            with contextlib.suppress(ModelLoadFailedError):
                await self._load_from(name, path, stamp=stamp)


def _warn_unclassified(config: mc.ModelConfig) -> None:
    """A model asks for fair share on a server whose requests carry no class: say so, since it
    would otherwise serve first come, first served without a word."""
    if is_ensemble(config) or not BatchPolicy.from_config(config).fair_share:
        return
    _log.warning(
        "model '%s' sets convoy_fair_share, but the server was started without "
        "--fair-share-header: its requests carry no class and are served first come, first "
        "served; start the server with --fair-share-header NAME to share its batches",
        config.name,
    )
