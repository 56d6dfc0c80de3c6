"""A model's directory: its name's rule, the stamp that tells a poll whether its files changed,
the digest of what a version's answers depend on, and the files a load request lays out as one."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from pathlib import Path

from server.contract.errors import LOAD_NOT_POLLED, InvalidInputError


def check_name(name: str) -> None:
    """A model name is one plain directory name: nothing outside the repositories is reachable."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        raise InvalidInputError(f"invalid model name '{name}': it must be a plain directory name")


def directory_stamp(path: Path) -> tuple[object, ...]:
    """Every directory below a model directory, and every file's size and modification time."""
    stamp: list[tuple[object, ...]] = []
    for item in sorted(path.rglob("*")):
        with contextlib.suppress(OSError):  # gone since listed: the next poll sees it
            relative = str(item.relative_to(path))
            if item.is_dir():
                stamp.append((relative,))
            elif item.is_file():
                info = item.stat()
                stamp.append((relative, info.st_size, info.st_mtime_ns))
    return tuple(stamp)


def content_digest(path: Path, version: int, config: bytes) -> bytes:
    """SHA-256 over what a version's answers depend on: its effective config (`config`,
    serialized deterministically) and the contents of every file in its model directory but
    the other versions' (and `__pycache__`). Replicas serving the same files agree on it; any
    change to the model's files or config changes it. Reads every file: call from a thread."""
    digest = hashlib.sha256(config)
    for item in sorted(path.rglob("*")):
        relative = item.relative_to(path)
        top = relative.parts[0]
        if "__pycache__" in relative.parts or (top.isdigit() and top != str(version)):
            continue
        with contextlib.suppress(OSError):  # gone since listed: then not part of the load
            if item.is_file():
                with item.open("rb") as data:
                    contents = hashlib.file_digest(data, "sha256").digest()
                digest.update(str(relative).encode() + b"\0" + contents)
    return digest.digest()


def write_files(name: str, path: Path, files: Mapping[str, bytes]) -> Path:
    """Lay out `file:` parameters (paths in the model directory, "<version>/<file>" for a
    version's files) as model `name`'s directory."""
    for key, data in files.items():
        relative = Path(key)
        if relative.is_absolute() or not relative.parts or ".." in relative.parts:
            raise LOAD_NOT_POLLED(
                model=name,
                reason=f"invalid file parameter 'file:{key}': it must name a file inside the "
                "model directory",
            )
        target = path / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:  # a file where a directory must be, or the reverse
            raise LOAD_NOT_POLLED(
                model=name, reason=f"invalid file parameter 'file:{key}': {exc.strerror}"
            ) from exc
    return path
