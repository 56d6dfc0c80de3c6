"""`SharedArrays`: where the instances of one python model version keep the arrays they share
(`pb_utils.shared_array`): a directory in shared memory, made when the first instance opens and
removed when the last one closes."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading

_SHARED_MEMORY = "/dev/shm"  # tmpfs: files there are pages of memory, mapped by every process
_PREFIX = "convoy-shared-"  # then the server's pid: a killed server's arrays are found again


class SharedArrays:
    """One model version's shared arrays; `acquire` and `release` once per instance."""

    def __init__(self, label: str) -> None:
        self._label = re.sub(r"[^A-Za-z0-9_.-]", "_", label)
        self._path: str | None = None
        self._users = 0
        self._lock = threading.Lock()  # instances open and close on threads of their own

    def acquire(self) -> str:
        """The directory, made for the first instance."""
        with self._lock:
            if self._path is None:
                root = (
                    _SHARED_MEMORY if os.access(_SHARED_MEMORY, os.W_OK) else tempfile.gettempdir()
                )
                _sweep(root)
                prefix = f"{_PREFIX}{os.getpid()}-{self._label}-"
                self._path = tempfile.mkdtemp(prefix=prefix, dir=root)
            self._users += 1
            return self._path

    def release(self) -> None:
        """An instance is done with it; the last one removes the directory and its arrays
        (processes that still map one keep its pages until they unmap them)."""
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._path is not None:
                shutil.rmtree(self._path, ignore_errors=True)
                self._path = None


def _sweep(root: str) -> None:
    """Remove the shared arrays of servers that are gone (killed before they could)."""
    for entry in os.scandir(root):
        if not entry.name.startswith(_PREFIX) or not entry.is_dir():
            continue
        pid = entry.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        return True
    return True
