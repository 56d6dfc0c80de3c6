"""`Sources`: the repositories one `Repository` scans, local directories and local mirrors of
cloud ones. A cloud repository that cannot be read keeps its last copy, and the reason."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from pathlib import Path

from server.contract.errors import ConfigError
from server.core.storage import Mirror, StorageError

_log = logging.getLogger(__name__)


class Sources:
    """Scans every repository for model directories; syncs the cloud ones first."""

    def __init__(self, roots: Sequence[Path | Mirror]) -> None:
        self._roots = tuple(roots)
        self._mirrors = tuple(root for root in self._roots if isinstance(root, Mirror))
        self._unavailable: dict[Mirror, str] = {}  # why its last sync failed
        self._synced: set[Mirror] = set()  # read at least once: its models are served

    def scan(self) -> dict[str, Path]:
        """Every model directory of every repository; a name in two repositories is an error."""
        found: dict[str, Path] = {}
        shown: dict[str, str] = {}  # the model's place as the user named its repository
        for root in self._roots:
            directory = root.root if isinstance(root, Mirror) else root
            if not directory.is_dir():
                raise ConfigError(f"model repository '{root}' is not a directory")
            for path in sorted(directory.iterdir()):
                if not path.is_dir() or path.name.startswith("."):
                    continue
                place = f"{root.location}/{path.name}" if isinstance(root, Mirror) else str(path)
                if path.name in found:
                    raise ConfigError(
                        f"model '{path.name}' is in two repositories: '{shown[path.name]}' and "
                        f"'{place}'; model names must be unique across repositories"
                    )
                found[path.name] = path
                shown[path.name] = place
        return found

    async def sync(self, models: Collection[str] | None = None) -> None:
        """Bring the cloud repositories' copies of `models` (all when None) up to date; one that
        fails is logged and left as it was, and the others go on."""
        for mirror in self._mirrors:
            try:
                await mirror.sync(models)
            except StorageError as exc:
                if self._unavailable.get(mirror) != str(exc):  # logged once while it lasts
                    kept = "; its models stay as last read" if mirror in self._synced else ""
                    _log.error("%s%s", exc, kept)
                self._unavailable[mirror] = str(exc)
            else:
                self._synced.add(mirror)
                if self._unavailable.pop(mirror, None) is not None:
                    _log.info("model repository '%s' is available again", mirror.location)

    def unavailable(self) -> list[tuple[str, str]]:
        """Each cloud repository whose last sync failed, and why."""
        return [(mirror.location, reason) for mirror, reason in self._unavailable.items()]

    def stale(self, path: Path | None) -> str | None:
        """Why a model directory (None: one not found) may not be what its repository holds:
        its cloud repository, or for a model not found any cloud one, could not be read."""
        failed = [
            reason
            for mirror, reason in self._unavailable.items()
            if path is None or path.parent == mirror.root
        ]
        return "; ".join(failed) or None
