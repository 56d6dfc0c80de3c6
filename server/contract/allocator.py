"""Large buffers kept by the C allocator: Convoy's processes ask glibc's malloc to reuse the memory
of the arrays a request frees instead of handing it back to the kernel and faulting it in again.

By default glibc serves an allocation above its mmap threshold with fresh pages, and gives the
free top of its heap back to the kernel above its trim threshold; both start at 128 KiB and rise
only as large blocks are freed (the trim threshold to twice the other). A request that allocates
a few large arrays together and frees them (a decoded image and its resized copies, a batch and
its outputs) then pays a page fault and a zeroed page for every 4 KiB it touches, every time:
the example `preprocess` model.py took about 900 page faults per request served from worker
processes (theirs and the server's), 400 in the server's process.

So every process of a server runs with an mmap threshold of 16 MiB and a trim threshold of
32 MiB, where glibc's own rule ends once a 16 MiB block has been freed: the core sets them with
`mallopt` (it is running already) and passes them to the processes it starts (front-end
workers, Python model processes) in `GLIBC_TUNABLES`, which they read as they start. What this
costs: a heap may keep up to 32 MiB of freed memory for the next requests instead of returning
it at once (blocks of 16 MiB and more still come from the kernel and go back to it).

The environment's own choice rules: when `GLIBC_TUNABLES` names either threshold, or
`MALLOC_MMAP_THRESHOLD_` or `MALLOC_TRIM_THRESHOLD_` is set, nothing is changed; nor on a C
library without `mallopt` (musl). An allocator preloaded instead of glibc's (jemalloc,
tcmalloc) never reads these settings.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, MutableMapping

MMAP_THRESHOLD_BYTES = 16 << 20
TRIM_THRESHOLD_BYTES = 32 << 20
TUNABLES = "GLIBC_TUNABLES"
# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_OWN_TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")
_OWN_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tunables(environ: Mapping[str, str]) -> str | None:
    """`GLIBC_TUNABLES` with both thresholds added to what it holds already; None when the
    environment sets either threshold itself."""
    held = environ.get(TUNABLES, "")
    named = {item.partition("=")[0].strip() for item in held.split(":")}
    if any(name in environ for name in _OWN_VARIABLES) or named.intersection(_OWN_TUNABLES):
        return None
    ours = (
        f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD_BYTES}:"
        f"glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}"
    )
    return f"{held}:{ours}" if held else ours


def keep_large_buffers(environ: MutableMapping[str, str]) -> bool:
    """Set both thresholds in this process and in `environ` (the environment the processes it
    starts inherit); False, changing nothing, when the environment sets them itself or the C
    library is not glibc."""
    value = tunables(environ)
    if value is None:
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
    except (OSError, AttributeError):
        return False
    if not mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES):
        return False
    if not mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES):
        return False
    environ[TUNABLES] = value
    return True
