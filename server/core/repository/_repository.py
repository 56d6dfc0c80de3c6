"""`Repository`: the models of one or more repository directories, and their lifecycle (its
loads in `Loading`, its unloads in `Unloading`).

Loads, reloads and unloads never interrupt service: new versions are built beside the serving
ones and swapped in at once; replaced versions drain their accepted requests, then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from backends import CustomMetrics
from batching import RateLimiter
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError, ModelNotFoundError, ModelNotReadyError
from server.core.cache import ResponseCache
from server.core.repository import _model_loading as model_loading
from server.core.repository._autocomplete import DEFAULT_AUTO_COMPLETE, AutoComplete
from server.core.repository._budget import MemoryBudget
from server.core.repository._loader import Peers
from server.core.repository._loading import Loading
from server.core.repository._models import (
    UNLOADED,
    ModelEntry,
    ModelState,
    ModelVersion,
    VersionStatus,
)
from server.core.repository._sources import Sources
from server.core.repository._versions import parse_version
from server.core.storage import Mirror


class Repository(Loading):
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
        # The composing models of the ensembles being loaded, counted per load in progress.
        self._loading_for: Counter[str] = Counter()
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

    def _ready_config(self, name: str) -> mc.ModelConfig | None:
        entry = self._models.get(name)
        return entry.config if entry is not None and entry.ready else None

    def is_evicted(self, name: str) -> bool:
        entry = self._models.get(name)
        return entry is not None and entry.evicted and not entry.ready

    def was_idle(self, name: str) -> bool:
        """Whether the keep-alive unloaded the model (and nothing loaded it since)."""
        entry = self._models.get(name)
        return entry is not None and entry.idle_unloaded and not entry.ready

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


def _reason_suffix(statuses: list[VersionStatus]) -> str:
    reasons = [s.reason for s in statuses if s.reason]
    return f": {reasons[0]}" if reasons else ""
