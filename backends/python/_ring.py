"""`Ring`: one direction's shared memory on a python worker's channel, a memfd both processes map.

The sender copies a message's buffers into it and the socket carries their offsets and lengths
only (`_frames.py`); the receiver releases a message's space in the order the messages came.
Runs in the worker too, so it imports nothing from Convoy.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

RING_BYTES = 64 << 20  # each direction's shared memory; pages are touched only as used
_ALIGN = 64
_TAIL = struct.Struct("<Q")  # at offset 0: how far the receiver has released
_DATA_START = _ALIGN


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


class Ring:
    """One direction's shared memory; the sender appends, the receiver releases in order.

    Positions only grow; a position's place in the data area is position % capacity. A message's
    buffers lie contiguous (a message that would straddle the end starts again at the beginning,
    and the skipped bytes are released with it), and when everything sent has been released the
    next message starts at the beginning, so a steady load keeps touching the same pages."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._map = mmap.mmap(fd, size)
        self._capacity = size - _DATA_START
        self._head = 0  # the sender's next position
        self._pending: collections.deque[list[Any]] = collections.deque()  # [end, released]
        self._lock = threading.Lock()  # a decoupled model's threads release from their own

    @classmethod
    def create(cls, name: str, size: int = RING_BYTES) -> Ring:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            return cls(fd, size)
        except OSError:
            os.close(fd)
            raise

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def size(self) -> int:
        return self._capacity + _DATA_START

    def close(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(BufferError):  # a view still held: the map goes with it
            self._map.close()
        os.close(self._fd)
        self._fd = -1

    # The sender's side.

    def place(self, raws: Sequence[memoryview]) -> tuple[list[int], int] | None:
        """Copy `raws` into the ring: their offsets and the message's end position, or None
        when they do not fit now (they go inline)."""
        total = sum(_aligned(raw.nbytes) for raw in raws)
        if not raws or total > self._capacity:
            return None
        (tail,) = _TAIL.unpack_from(self._map, 0)
        start = self._head
        if tail == start:  # everything released: begin again at the start of the area
            start = tail = -(-start // self._capacity) * self._capacity
        place = start % self._capacity
        if place + total > self._capacity:
            start += self._capacity - place
            place = 0
        if start + total - tail > self._capacity:
            return None
        offsets = []
        for raw in raws:
            at = _DATA_START + place
            self._map[at : at + raw.nbytes] = raw.cast("B")
            offsets.append(place)
            place += _aligned(raw.nbytes)
        self._head = start + total
        return offsets, self._head

    # The receiver's side.

    def view(self, offset: int, length: int) -> memoryview:
        if offset < 0 or length < 0 or offset + length > self._capacity:
            raise ValueError(f"a buffer of {length} bytes at {offset} lies outside the ring")
        return memoryview(self._map)[_DATA_START + offset : _DATA_START + offset + length]

    def hold(self, end: int) -> list[Any]:
        """Note a received message that reaches `end`; `release` it when it is no longer read."""
        entry = [end, False]
        with self._lock:
            self._pending.append(entry)
        return entry

    def release(self, entry: list[Any]) -> None:
        with self._lock:
            entry[1] = True
            tail = None
            while self._pending and self._pending[0][1]:
                tail = self._pending.popleft()[0]
            if tail is not None:
                _TAIL.pack_into(self._map, 0, tail)
