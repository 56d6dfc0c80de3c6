"""`Repository`: the models found in a model repository directory and their loaded versions."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from server.errors import ConfigError, InvalidInputError, ModelNotFoundError, ModelNotReadyError
from server.repository._loader import load_model, unload_version
from server.repository._models import ModelEntry, ModelState, ModelVersion, VersionStatus

_log = logging.getLogger(__name__)


class Repository:
    """Owns every model entry; read and changed on the event loop only."""

    def __init__(self, root: Path, load_concurrency: int = 4) -> None:
        self._root = root
        self._load_concurrency = max(load_concurrency, 1)
        self._models: dict[str, ModelEntry] = {}

    async def load_all(self) -> None:
        """Load every model directory (in parallel, bounded); a broken one never stops the rest."""
        if not self._root.is_dir():
            raise ConfigError(f"model repository '{self._root}' is not a directory")
        gate = asyncio.Semaphore(self._load_concurrency)

        async def load(path: Path) -> ModelEntry:
            async with gate:
                return await load_model(path.name, path)

        paths = sorted(p for p in self._root.iterdir() if p.is_dir() and not p.name.startswith("."))
        for entry in await asyncio.gather(*(load(p) for p in paths)):
            self._models[entry.name] = entry

    async def unload_all(self, timeout_s: float) -> None:
        versions = [v for entry in self._models.values() for v in entry.ready.values()]
        await asyncio.gather(*(unload_version(v, timeout_s) for v in versions))
        for entry in self._models.values():
            entry.ready.clear()

    def entries(self) -> list[ModelEntry]:
        return [self._models[name] for name in sorted(self._models)]

    def all_ready(self) -> bool:
        """Every model has a ready version and no version failed (Triton's strict readiness)."""
        return all(
            entry.ready and all(s.state is ModelState.READY for s in entry.statuses)
            for entry in self._models.values()
        )

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
        try:
            self.get(name, version)
        except (ModelNotFoundError, ModelNotReadyError):
            return False
        return True

    def index(self) -> list[tuple[str, VersionStatus]]:
        return [(entry.name, status) for entry in self.entries() for status in entry.statuses]


def parse_version(version: str) -> int:
    """A request's model_version string as a number; anything else is a clear error."""
    if not version.isdigit():
        raise InvalidInputError(
            f"model version must be a non-negative integer or empty, got '{version}'"
        )
    return int(version)


def _reason_suffix(statuses: list[VersionStatus]) -> str:
    reasons = [s.reason for s in statuses if s.reason]
    return f": {reasons[0]}" if reasons else ""
