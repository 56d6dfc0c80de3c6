"""`Mirror`: a local copy of one cloud repository, brought up to date by listing the objects and
downloading only those whose size or tag (ETag, generation) changed since the last sync."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from backends import on_daemon_thread
from server.core.storage.errors import StorageUnavailableError

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One object of a repository, as a listing reports it."""

    key: str  # below the repository's prefix, "/"-separated: "<model>/<version>/model.onnx"
    size_bytes: int
    tag: str  # changes whenever the object is written (ETag, generation, last-modified)


class ObjectStore(Protocol):
    """The blocking calls a mirror makes; both raise StorageUnavailableError."""

    @property
    def location(self) -> str: ...

    def list(self) -> list[ObjectInfo]:
        """Every object below the repository's prefix."""
        ...

    def download(self, key: str, target: Path) -> None:
        """Write one object (a key of `list`) to a local file."""
        ...


class Mirror:
    """The models of one cloud repository under `root`, one directory per model as Triton lays
    them out. A sync whose listing or downloads fail changes nothing there."""

    def __init__(self, store: ObjectStore, root: Path, staging: Path) -> None:
        self._store = store
        self.root = root  # the directory the repository scans
        self._staging = staging  # downloads land here until all of a sync's have arrived
        self._have: dict[str, tuple[int, str]] = {}  # key -> (size, tag) of the files in root
        self._syncing = threading.Lock()  # one sync at a time, each in a worker thread
        root.mkdir(parents=True, exist_ok=True)

    @property
    def location(self) -> str:
        return self._store.location

    async def sync(self, models: Collection[str] | None = None) -> None:
        """List the repository; make a directory for each model in it and drop those of models
        gone; download the changed files of `models` (all when None). Raises
        StorageUnavailableError and then leaves the local copy as it was. On a daemon thread: a
        store that stops answering holds a sync for its client's timeouts and retries (S3's: 60 s
        a read, three attempts), which a stopping server does not wait for."""
        wanted = None if models is None else set(models)
        await on_daemon_thread(self._sync, wanted, name="convoy-repository-sync")

    def _sync(self, models: set[str] | None) -> None:
        with self._syncing:
            self._sync_locked(models)

    def _sync_locked(self, models: set[str] | None) -> None:
        listing = {info.key: info for info in self._store.list() if self._usable(info.key)}
        if not listing:
            raise StorageUnavailableError(
                f"model repository '{self.location}' holds no objects (is the path right?)"
            )
        names = {key.partition("/")[0] for key in listing}
        wanted = names if models is None else names & models
        fetch = [
            info
            for info in listing.values()
            if info.key.partition("/")[0] in wanted
            and not info.key.endswith("/")
            and self._have.get(info.key) != (info.size_bytes, info.tag)
        ]
        drop = [  # gone from a wanted model, or with its whole model
            key
            for key in self._have
            if key not in listing
            and (key.partition("/")[0] in wanted or key.partition("/")[0] not in names)
        ]
        folders = [key for key in listing if key.endswith("/") and key.partition("/")[0] in wanted]
        shutil.rmtree(self._staging, ignore_errors=True)
        try:
            for info in fetch:
                target = self._staging / info.key
                target.parent.mkdir(parents=True, exist_ok=True)
                self._store.download(info.key, target)
            self._apply(fetch, drop, folders, names)
        except OSError as exc:  # the local copy: a full disk, a key both a file and a folder
            raise StorageUnavailableError(
                f"model repository '{self.location}': cannot write its local copy in "
                f"'{self.root}': {exc}"
            ) from exc
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)
        if fetch or drop:
            _log.info(
                "model repository '%s': %d file(s) downloaded, %d removed",
                self.location,
                len(fetch),
                len(drop),
            )

    def _apply(
        self, fetch: list[ObjectInfo], drop: list[str], folders: list[str], names: set[str]
    ) -> None:
        for key in drop:
            with contextlib.suppress(FileNotFoundError):
                (self.root / key).unlink()
            del self._have[key]
            parent = (self.root / key).parent
            while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()  # a version directory its last object left
                parent = parent.parent
        for info in fetch:
            target = self.root / info.key
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._staging / info.key, target)
            self._have[info.key] = (info.size_bytes, info.tag)
        for key in folders:  # folder marker objects, as some tools write them
            (self.root / key).mkdir(parents=True, exist_ok=True)
        for name in names:  # a model listed but not downloaded is still in the index
            (self.root / name).mkdir(exist_ok=True)
        for path in self.root.iterdir():
            if path.name in names:
                continue
            if path.is_dir():  # a model gone from the repository
                shutil.rmtree(path)
            else:
                path.unlink()

    def _usable(self, key: str) -> bool:
        """A key inside a model directory and inside the copy (no '..', no absolute path)."""
        parts = PurePosixPath(key).parts
        if len(parts) < 2 and not key.endswith("/"):
            return False  # a file beside the models: not part of any model
        if key.startswith("/") or any(part in ("..", ".") for part in parts) or "\\" in key:
            _log.warning("model repository '%s': object '%s' ignored", self.location, key)
            return False
        return not parts[0].startswith(".")
