"""`shared_array`, Convoy's addition: one read-only copy of an array for every instance of a
model version, in the shared memory directory the worker installs."""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import TritonModelException

# Where `shared_array` keeps this model version's arrays: installed by the worker (None: no server
# behind the package, so each call loads its own).
_shared_dir: str | None = None
_SHARED_KEY = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def _install_shared_dir(path: str | None) -> None:
    global _shared_dir
    _shared_dir = path


def shared_array(key: str, load: Callable[[], npt.ArrayLike]) -> npt.NDArray[Any]:
    """Convoy's addition, not Triton's: one read-only copy of a numeric array for every instance
    of this model version, each mapping the same shared memory pages.

    The first instance to ask for `key` runs `load()` and places what it returns in shared memory;
    the others, and an instance whose worker was restarted, map that copy and never call `load`.
    Call it from `initialize` for weights each instance would otherwise hold a copy of. `key`
    is letters, digits, `_`, `.` and `-`. Outside a Convoy server it returns `load()` itself."""
    if not _SHARED_KEY.fullmatch(key):
        raise TritonModelException(
            f"shared_array key {key!r} must be 1-200 letters, digits, '_', '.' or '-'"
        )
    if _shared_dir is None:
        return np.asarray(load())
    path = os.path.join(_shared_dir, f"{key}.npy")
    with open(os.path.join(_shared_dir, f"{key}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process loads; the others wait, then map it
        if not os.path.exists(path):
            array = np.asarray(load())
            if array.dtype.hasobject:
                raise TritonModelException(
                    f"shared_array {key!r}: only numeric arrays can be shared, not {array.dtype}"
                )
            partial = f"{path}.{os.getpid()}.partial"
            with open(partial, "wb") as out:
                np.save(out, array, allow_pickle=False)
            os.replace(partial, path)  # whole or absent, whoever looks
    shared: npt.NDArray[Any] = np.load(path, mmap_mode="r", allow_pickle=False)
    return shared
