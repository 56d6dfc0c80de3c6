"""`Repository`: the models of one or more repository directories, and their lifecycle.

Loads, reloads and unloads never interrupt service: new versions are built beside the serving
ones and swapped in at once; replaced versions drain their accepted requests, then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from backends import CustomMetrics
from batching import BatchPolicy, RateLimiter
from proto import model_config_pb2 as mc
from server.contract.errors import (
    LOAD_FAILED,
    LOAD_NOT_POLLED,
    ConfigError,
    ModelLoadFailedError,
    ModelNotFoundError,
    ModelNotReadyError,
)
from server.core.cache import ResponseCache, version_cache
from server.core.repository import _model_loading as model_loading
from server.core.repository._autocomplete import DEFAULT_AUTO_COMPLETE, AutoComplete
from server.core.repository._budget import MemoryBudget, Resident, plan_room
from server.core.repository._config import read_config
from server.core.repository._directories import check_name, directory_stamp, write_files
from server.core.repository._loader import Built, Peers, build_model, unload_version
from server.core.repository._models import (
    UNLOADED,
    ModelEntry,
    ModelState,
    ModelVersion,
    VersionStatus,
)
from server.core.repository._sources import Sources
from server.core.repository._versions import parse_version
from server.core.serving.ensemble import composing_models, is_ensemble
from server.core.storage import Mirror

_log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0  # how long a replaced or unloaded version may finish its requests


class Repository:
    """Owns every model entry; read and changed on the event loop only."""

    def __init__(
        self,
        roots: Sequence[Path | Mirror],
        load_concurrency: int = 4,
        budget: MemoryBudget | None = None,
        completion: AutoComplete = DEFAULT_AUTO_COMPLETE,
        cache: ResponseCache | None = None,
        limiter: RateLimiter | None = None,
        config_name: str | None = None,
        load_retries: int = 0,
        backend_directory: Path | None = None,
        latency_histograms: bool = False,
        requests_classified: bool = True,
        explicit_model_control: bool = False,
    ) -> None:
        self._sources = Sources(roots)  # local directories, and mirrors of cloud repositories
        # --fair-share-header was given, so requests carry a fair-share class; False: a model
        # that asks for fair share is warned about at each load (it serves first come first).
        self._requests_classified = requests_classified
        self._config_name = config_name  # configs/<name>.pbtxt over config.pbtxt (Triton's)
        self._backend_directory = backend_directory  # where Python-based backends are found
        self._load_retries = load_retries  # a failed build is tried again this many times
        self._latency_histograms = latency_histograms  # versions observe Triton's histograms
        self._cache = cache  # the server's response cache, for the versions that enable it
        self._limiter = limiter  # the rate limiter every instance registers with (None: off)
        self._completion = completion  # what model files may fill into configs
        self._load_concurrency = max(load_concurrency, 1)
        self._budget = budget
        self._models: dict[str, ModelEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}  # one lifecycle operation per model at once
        self._draining: set[asyncio.Task[None]] = set()
        self._lazy: dict[str, asyncio.Task[None]] = {}  # on-demand loads of evicted models
        self._changes = 0  # see `changes`
        # The families Python models register (`pb_utils.MetricFamily`), for the metrics page.
        self.custom_metrics = CustomMetrics()
        # A Python model's model loading API loads and unloads only in explicit mode, as the
        # repository API does.
        loading = functools.partial(model_loading.answer, self, explicit_model_control)
        self._peers = Peers(self._ready_config, self.get, self.custom_metrics, loading)

    @property
    def changes(self) -> int:
        """How many times the loaded models have changed: a load put versions in service, or
        an unloaded or replaced version finished unloading."""
        return self._changes

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

        An ensemble's composing models are loaded first when they are not ready.
        """
        await self._load_composing(name, path, override, chain)
        async with self._lock(name):
            stamp = directory_stamp(path) if stamp is None else stamp
            await self._build_and_swap(name, path, override, stamp)

    async def _load_composing(
        self, name: str, path: Path, override: mc.ModelConfig | None, chain: tuple[str, ...]
    ) -> None:
        try:
            config = override if override is not None else read_config(path, self._config_name)
        except (ConfigError, OSError):
            return  # the build reports it
        if config is None or not is_ensemble(config):
            return
        await self._sources.sync(composing_models(config))
        found = self.scan()
        for model in composing_models(config):
            if model in chain or model == name or self.is_ready(model) or model not in found:
                continue  # a cycle or an unknown model: the ensemble's plan names it
            with contextlib.suppress(ModelLoadFailedError):  # in the index, and logged
                await self._load_from(model, found[model], chain=(*chain, name))

    def _ready_config(self, name: str) -> mc.ModelConfig | None:
        entry = self._models.get(name)
        return entry.config if entry is not None and entry.ready else None

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
            built_version.cache = version_cache(
                self._cache, built_version.config, built_version.version
            )
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
        self._changes += 1
        self._retire(replaced)
        if entry.config is not None and not self._requests_classified:
            _warn_unclassified(entry.config)
        if built.failures:
            entry.failed_stamp = stamp
            reason = "; ".join(built.failures)
            _log.error("model '%s' is unavailable: %s", name, reason)
            raise LOAD_FAILED(model=name, reason=reason)

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
        """The models a ready ensemble uses (never unloaded under it)."""
        return {
            model
            for e in self._models.values()
            if e.ready and e.config is not None
            for model in composing_models(e.config)
        }

    async def _take_down(self, entry: ModelEntry, reason: str) -> None:
        old = entry.ready
        entry.ready = {}
        entry.evicted = True
        entry.statuses = [VersionStatus(v, ModelState.UNAVAILABLE, reason) for v in sorted(old)]
        await asyncio.gather(*(self._unload_version(v, DRAIN_TIMEOUT_S) for v in old.values()))

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

    def is_evicted(self, name: str) -> bool:
        entry = self._models.get(name)
        return entry is not None and entry.evicted and not entry.ready

    def was_idle(self, name: str) -> bool:
        """Whether the keep-alive unloaded the model (and nothing loaded it since)."""
        entry = self._models.get(name)
        return entry is not None and entry.idle_unloaded and not entry.ready

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

    async def unload_all(self, timeout_s: float) -> None:
        versions = [v for entry in self._models.values() for v in entry.ready.values()]
        for entry in self._models.values():
            entry.ready = {}
        await asyncio.gather(*(self._unload_version(v, timeout_s) for v in versions))
        await asyncio.gather(*self._draining)

    def entries(self) -> list[ModelEntry]:
        return [self._models[name] for name in sorted(self._models)]

    def all_ready(self) -> bool:
        """Every model meant to serve is ready (Triton's strict readiness); models unloaded on
        purpose do not count."""
        return all(
            entry.ready and all(s.state is ModelState.READY for s in entry.statuses)
            for entry in self._models.values()
            if not entry.unloaded and not entry.evicted
        )

    def failures(self) -> list[tuple[str, str]]:
        """Every model that failed to load (not one unloaded or evicted on purpose): its name
        and why."""
        return [
            (entry.name, status.reason)
            for entry in self.entries()
            for status in entry.statuses
            if status.state is ModelState.UNAVAILABLE
            and status.reason
            and status.reason != UNLOADED
            and not entry.evicted
        ]

    def entry(self, name: str) -> ModelEntry:
        entry = self._models.get(name)
        if entry is None:
            raise ModelNotFoundError(f"Request for unknown model: '{name}' is not found")
        return entry

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The version to serve: the named one, or the newest ready one when version is empty."""
        entry = self.entry(name)
        if not version:
            found = entry.latest_ready()
            if found is None:
                raise ModelNotReadyError(
                    f"Request for unknown model: '{name}' has no available versions"
                    + _reason_suffix(entry.statuses)
                )
            return found
        number = parse_version(version)
        found = entry.ready.get(number)
        if found is not None:
            return found
        if any(s.version == number for s in entry.statuses):
            raise ModelNotReadyError(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
                + _reason_suffix([s for s in entry.statuses if s.version == number])
            )
        raise ModelNotFoundError(
            f"Request for unknown model: '{name}' version {number} is not found"
        )

    def is_ready(self, name: str, version: str = "") -> bool:
        """Loaded, and every instance healthy (a python model's dead worker makes its model
        not ready until the worker is replaced)."""
        try:
            target = self.get(name, version)
        except (ModelNotFoundError, ModelNotReadyError):
            return False
        return all(instance.healthy for instance in target.instances)

    async def check_ready(self, name: str, version: str = "") -> bool:
        """What ModelReady answers: `is_ready`, and every instance's own check (a python
        model's `is_ready()`, asked on each call, all instances at once)."""
        try:
            target = self.get(name, version)
        except (ModelNotFoundError, ModelNotReadyError):
            return False
        answers = await asyncio.gather(*(instance.ready() for instance in target.instances))
        return all(answers)

    def index(self) -> list[tuple[str, VersionStatus]]:
        """Every model of the repositories with its state, loaded or not."""
        statuses = {entry.name: entry.statuses for entry in self._models.values()}
        with contextlib.suppress(ConfigError):
            for name in self.scan():
                statuses.setdefault(name, [])
        return [
            (name, status)
            for name in sorted(statuses)
            for status in statuses[name] or [VersionStatus(None, ModelState.UNAVAILABLE, UNLOADED)]
        ]

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


def _reason_suffix(statuses: list[VersionStatus]) -> str:
    reasons = [s.reason for s in statuses if s.reason]
    return f": {reasons[0]}" if reasons else ""
