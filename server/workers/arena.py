"""Shared memory arenas between a front-end worker and the core: one memfd segment mapped in both
processes (`Arena`), and the offset allocator that the process writing into it keeps
(`Allocator`)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

ALIGNMENT_BYTES = 64  # every block starts on a cache line, so any dtype's array is aligned

# An arena that cannot shrink cannot turn a peer's valid offset into a SIGBUS.
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class Allocator:
    """Offsets of blocks in [0, size_bytes), for the one process that writes the arena.

    Segregated fit with immediate coalescing (the shape of TLSF): free blocks sit in bins by
    power of two of their size, a bitmask says which bins hold any, and two dicts keyed by a
    free block's start and end find its neighbours when a block is released. `allocate` takes a
    block from the smallest bin whose every block fits (one bit trick, no search) and splits off
    the rest; `release` merges the block with free neighbours at once. Both are a few dict
    operations (only a nearly full arena, where just the bin below the size's power of two can
    still fit it, scans that one bin); a block wastes at most the 63 bytes of alignment; freed
    space is whole again as soon as its neighbours are free, so with everything released the
    arena is one block. Power-of-two size classes (a buddy allocator) would waste up to half of
    every block; a first-fit list would scan. Memory is never touched: this is bookkeeping over
    ints. Churning 64 B to 4 MiB blocks in 64 MiB, no allocation fails below two-thirds full.
    """

    def __init__(self, size_bytes: int) -> None:
        if size_bytes < ALIGNMENT_BYTES:
            raise ValueError(
                f"an allocator needs at least {ALIGNMENT_BYTES} bytes, not {size_bytes}"
            )
        self.size_bytes = size_bytes - size_bytes % ALIGNMENT_BYTES  # usable bytes
        self._allocated: dict[int, int] = {}  # block offset -> block bytes
        self._free_at: dict[int, int] = {}  # free block offset -> bytes
        self._free_ending: dict[int, int] = {}  # free block end offset -> its offset
        # Bin k holds the free blocks of 2**k to 2**(k+1) - 1 bytes, as an ordered set.
        self._bins: list[dict[int, None]] = [{} for _ in range(self.size_bytes.bit_length())]
        self._nonempty = 0  # bit k set when bin k holds a block
        self._used_bytes = 0
        self._add_free(0, self.size_bytes)

    @property
    def used_bytes(self) -> int:
        """Bytes in allocated blocks, alignment padding included."""
        return self._used_bytes

    @property
    def free_bytes(self) -> int:
        """Bytes not allocated (possibly in several blocks)."""
        return self.size_bytes - self._used_bytes

    def allocate(self, nbytes: int) -> int | None:
        """The offset of a new block of at least `nbytes`, 64-byte aligned; None when no free
        block is large enough (the caller falls back, e.g. sends the bytes inline)."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        size = max(-(-nbytes // ALIGNMENT_BYTES), 1) * ALIGNMENT_BYTES
        if size > self.size_bytes:
            return None
        first = (size - 1).bit_length()  # every block in bin `first` and above fits
        candidates = self._nonempty >> first
        if candidates:
            k = first + (candidates & -candidates).bit_length() - 1
            offset = next(reversed(self._bins[k]))  # the most recently freed: its pages are warm
            block = self._free_at[offset]
        else:
            # Only the bin below can hold a block that fits, one of `size` to 2**first - 1 bytes.
            below = self._bins[first - 1]
            offset = next((at for at in below if self._free_at[at] >= size), -1)
            if offset < 0:
                return None
            block = self._free_at[offset]
        self._remove_free(offset, block)
        if block > size:
            self._add_free(offset + size, block - size)
        self._allocated[offset] = size
        self._used_bytes += size
        return offset

    def release(self, offset: int) -> None:
        """Free the block at `offset`; ValueError if it is not allocated."""
        size = self._allocated.pop(offset, None)
        if size is None:
            raise ValueError(
                f"offset {offset} is not an allocated block (released twice, or never allocated)"
            )
        self._used_bytes -= size
        after = self._free_at.get(offset + size)
        if after is not None:
            self._remove_free(offset + size, after)
            size += after
        before = self._free_ending.get(offset)
        if before is not None:
            self._remove_free(before, offset - before)
            size += offset - before
            offset = before
        self._add_free(offset, size)

    def _add_free(self, offset: int, size: int) -> None:
        self._free_at[offset] = size
        self._free_ending[offset + size] = offset
        k = size.bit_length() - 1
        self._bins[k][offset] = None
        self._nonempty |= 1 << k

    def _remove_free(self, offset: int, size: int) -> None:
        del self._free_at[offset]
        del self._free_ending[offset + size]
        k = size.bit_length() - 1
        free_bin = self._bins[k]
        del free_bin[offset]
        if not free_bin:
            self._nonempty &= ~(1 << k)


class Arena:
    """One shared memory segment, mapped read/write; make it with `create` or `attach`.

    The segment is a memfd: it has no name in /dev/shm, and the kernel frees it once every
    process has closed its descriptor and dropped its mapping, so a crashed process leaks
    nothing. Views and arrays point into the mapping without copying; they stay valid after
    `close()`, which unmaps only when the last of them is gone.
    """

    def __init__(self, fd: int, size_bytes: int) -> None:
        """Map `size_bytes` of the memfd `fd`, which the arena owns from here on."""
        if size_bytes <= 0:
            raise ValueError(f"an arena needs a positive size, not {size_bytes} bytes")
        self.size_bytes = size_bytes  # length of the mapping
        self._fd = fd
        self._closed = False
        self._mmap = mmap.mmap(fd, size_bytes)
        self._memory = memoryview(self._mmap)
        # A forgotten arena still closes its descriptor when it is collected.
        self._fd_finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def create(cls, size_bytes: int, name: str = "convoy-arena") -> Arena:
        """A new zero-filled segment of `size_bytes`; `name` shows in /proc/<pid>/fd only."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size_bytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            return cls(fd, size_bytes)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def attach(cls, fd: int, size_bytes: int) -> Arena:
        """Map a segment made by `create` in another process, from a descriptor received from it.

        The arena takes ownership of `fd` (no dup): `close()` closes it, and so does a failed
        attach. ValueError if the segment is smaller than `size_bytes` or can still shrink.
        """
        try:
            actual_bytes = os.fstat(fd).st_size
            if actual_bytes < size_bytes:
                raise ValueError(f"arena holds {actual_bytes} bytes, expected {size_bytes}")
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK == 0:
                raise ValueError("arena is not sealed against shrinking (not made by Arena.create)")
            return cls(fd, size_bytes)
        except BaseException:
            os.close(fd)
            raise

    @property
    def fd(self) -> int:
        """The memfd, for another process to inherit (`subprocess` `pass_fds`) and attach."""
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    def view(self, offset: int, nbytes: int) -> memoryview:
        """`nbytes` at `offset` as a writable memoryview of the segment (no copy)."""
        self._check(offset, nbytes)
        return self._memory[offset : offset + nbytes]

    def array(self, offset: int, dtype: npt.DTypeLike, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """A C-ordered array of `dtype` and `shape` at `offset`, a view of the segment (no copy)."""
        if self._closed:
            raise ValueError("arena is closed")
        count = math.prod(shape)
        if shape and min(shape) < 0:  # min's `default=` alone costs as much as frombuffer
            raise ValueError(f"shape {shape} has a negative dimension")
        try:
            # From the memoryview, never the bare mmap: NumPy keeps the buffer's owner without
            # holding its export, so an array on the mmap would let close() unmap under it,
            # while the memoryview an array keeps holds the export.
            flat = np.frombuffer(self._memory, dtype, count, offset)
        except ValueError as exc:  # NumPy's "buffer is smaller than requested size"
            raise IndexError(
                f"{np.dtype(dtype)} array of shape {shape} at offset {offset} does not fit in the "
                f"arena of {self.size_bytes} bytes"
            ) from exc
        return flat.reshape(shape)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Copy the C-contiguous buffer `data` to `offset` (one memcpy); returns its bytes."""
        source = memoryview(data)
        nbytes = source.nbytes
        self._check(offset, nbytes)
        self._memory[offset : offset + nbytes] = source.cast("B")
        return nbytes

    def write_array(self, offset: int, array: npt.NDArray[Any]) -> int:
        """Copy `array`, of any strides, to `offset` in C order; returns its bytes."""
        if array.flags.c_contiguous and not array.dtype.hasobject:
            # One memcpy through the buffer protocol: no array or view made over the target.
            nbytes = array.nbytes
            self._check(offset, nbytes)
            # NumPy's stubs do not declare ndarray a Buffer before Python 3.12.
            self._mmap[offset : offset + nbytes] = array  # type: ignore[call-overload]
            return nbytes
        target = self.array(offset, array.dtype, array.shape)
        np.copyto(target, array, casting="no")
        return array.nbytes

    def close(self) -> None:
        """Close the descriptor and unmap; views still alive keep the mapping until they go.

        Idempotent; `view`, `array` and `write` raise ValueError afterwards.
        """
        if self._closed:
            return
        self._closed = True
        # Views and arrays keep the memoryview, which holds the mmap's export: while any remains,
        # mmap.close() refuses (BufferError), and the mmap object unmaps once the last is gone.
        del self._memory
        with contextlib.suppress(BufferError):
            self._mmap.close()
        del self._mmap
        self._fd_finalizer()

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check(self, offset: int, nbytes: int) -> None:
        if self._closed:
            raise ValueError("arena is closed")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size_bytes:
            raise IndexError(
                f"{nbytes} bytes at offset {offset} do not fit in the arena of "
                f"{self.size_bytes} bytes"
            )
