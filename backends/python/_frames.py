"""The framing both ends of a python worker's channel use: a socket for messages, shared memory
for the arrays in them.

A message is a pickle (`_pickling.py`) whose buffers the sender copies into its direction's
`Ring` (`_ring.py`), the socket carrying their offsets and lengths only; buffers that do not fit
(the ring is full, or smaller than they are) travel inline on the socket instead, so a sender
never waits for space. Runs in the worker too, so it imports only its siblings.
"""

from __future__ import annotations

import io
import pickle
import socket
import struct
from collections.abc import Callable
from typing import Any

from ._pickling import Pickler
from ._ring import Ring

_HEADER = struct.Struct("<IQQB")  # buffer count, pickle length, ring end, lease (below)
# What the worker may keep in the ring until the batch is answered: an execute message's inputs
# (a new batch), a BLS call's outputs (the batch executing now).
LEASE_NONE, LEASE_NEW_BATCH, LEASE_TO_BATCH = 0, 1, 2
_BUFFER = struct.Struct("<QQ")  # one buffer's length, its ring offset + 1 (0: inline)
_MAX_PARTS = 512  # buffers per sendmsg, well under the kernel's IOV_MAX

Parts = list[memoryview]  # a message's bytes to send, in order


def write_message(
    sock: socket.socket,
    message: object,
    ring: Ring | None = None,
    lease: int = LEASE_NONE,
    waited: Callable[[], None] | None = None,
) -> None:
    """Send `message`, its arrays in `ring` where they fit; `lease`: how long the receiver may
    keep them there (the LEASE_* values). On a socket whose sends time out (SO_SNDTIMEO),
    `waited` is called each time one took nothing, and raises to give up."""
    _send_all(sock, encode_message(message, ring, lease), waited)


def encode_message(message: object, ring: Ring | None = None, lease: int = LEASE_NONE) -> Parts:
    """`message` as the parts to send, in order: its arrays placed in `ring` where they fit
    (`write_message`)."""
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(message)
    data = stream.getbuffer()
    raws = [buffer.raw() for buffer in buffers]
    placed = ring.place(raws) if ring is not None else None
    if placed is None:
        offsets, end = [-1] * len(raws), 0
        inline = raws
    else:
        (offsets, end), inline = placed, []
    head = _HEADER.pack(len(raws), len(data), end, lease) + b"".join(
        _BUFFER.pack(raw.nbytes, offset + 1) for raw, offset in zip(raws, offsets, strict=True)
    )
    return [memoryview(head), memoryview(data), *inline]


def frame_bytes(buffered: memoryview) -> int | None:
    """The length of the message that `buffered` begins with, once its header and descriptors
    are in it (None before)."""
    if len(buffered) < _HEADER.size:
        return None
    count, size, _, _ = _HEADER.unpack_from(buffered)
    descriptors: int = _HEADER.size + count * _BUFFER.size
    if len(buffered) < descriptors:
        return None
    inline: int = sum(
        length
        for length, offset in _BUFFER.iter_unpack(buffered[_HEADER.size : descriptors])
        if offset == 0
    )
    return descriptors + int(size) + inline


def read_frame(
    read_exact: Callable[[int], bytearray], ring: Ring | None = None
) -> tuple[bytearray, list[bytearray | memoryview], list[Any] | None, int]:
    """One message's pickle and its buffers, with the ring entry to release (None when nothing
    of it lies in the ring) and whether the sender leased them; buffers in the ring are views
    of it; the lease the sender gave. The caller chooses how to unpickle."""
    count, size, end, lease = _HEADER.unpack(read_exact(_HEADER.size))
    rest = read_exact(count * _BUFFER.size + size)  # one read: the descriptors, then the pickle
    data = rest[count * _BUFFER.size :]
    buffers: list[bytearray | memoryview] = []
    for length, offset in _BUFFER.iter_unpack(memoryview(rest)[: count * _BUFFER.size]):
        if offset == 0:
            buffers.append(read_exact(length))
        elif ring is None:
            raise ValueError("the message points into shared memory this end does not have")
        else:
            buffers.append(ring.view(offset - 1, length))
    entry = ring.hold(end) if ring is not None and end else None
    return data, buffers, entry, lease


def copied(
    ring: Ring, buffers: list[bytearray | memoryview], entry: list[Any] | None
) -> list[bytearray | memoryview]:
    """`buffers` out of the ring, which then gets their space back."""
    if entry is None:
        return buffers
    owned: list[bytearray | memoryview] = [bytearray(buffer) for buffer in buffers]
    ring.release(entry)
    return owned


class Reader:
    """A socket's bytes through a buffer of its own, so that a message usually takes one receive
    (each receive from a worker's channel wakes a thread, and lets another take the GIL).

    `receive_into(view)` fills some of `view` and answers how much (0: the other end closed);
    the caller's function decides how to wait. Bytes read past a message stay for the next."""

    def __init__(self, receive_into: Callable[[memoryview], int], size: int = 1 << 16) -> None:
        self._receive_into = receive_into
        self._buffer = bytearray(size)
        self._start = self._end = 0  # the unread bytes: self._buffer[start:end]

    def read_exact(self, size: int) -> bytearray:
        if self._end - self._start < size:
            self._fill(size)
        if self._end - self._start >= size:
            chunk = self._buffer[self._start : self._start + size]
            self._start += size
            return chunk
        # Larger than the buffer: what it holds, then the rest straight into the result.
        out = bytearray(size)
        got = self._end - self._start
        out[:got] = memoryview(self._buffer)[self._start : self._end]
        self._start = self._end = 0
        view = memoryview(out)
        while got < size:
            got += self._received(view[got:])
        return out

    def has_message(self) -> bool:
        """Whether a whole message is buffered: `read_frame` then reads it without a receive."""
        buffered = memoryview(self._buffer)[self._start : self._end]
        size = frame_bytes(buffered)
        return size is not None and size <= len(buffered)

    @property
    def full(self) -> bool:
        """The buffer holds all it can, unread: a message that has not come whole in it is
        larger than the buffer."""
        return self._start == 0 and self._end == len(self._buffer)

    def take_arrived(self, receive_now: Callable[[memoryview], int]) -> bool:
        """Buffer what has arrived, with `receive_now`, a receive that does not wait
        (BlockingIOError when nothing has); False when the other end closed."""
        self._compact()
        if self._end == len(self._buffer):
            return True
        try:
            count = receive_now(memoryview(self._buffer)[self._end :])
        except BlockingIOError:
            return True
        self._end += count
        return count > 0

    def _compact(self) -> None:
        """Move the unread bytes to the front."""
        if self._start:
            unread = self._end - self._start
            self._buffer[:unread] = self._buffer[self._start : self._end]
            self._start, self._end = 0, unread

    def _fill(self, size: int) -> None:
        """Read until `size` bytes are buffered, or the buffer holds all it can."""
        self._compact()
        view = memoryview(self._buffer)
        while self._end < min(size, len(self._buffer)):
            self._end += self._received(view[self._end :])

    def _received(self, view: memoryview) -> int:
        count = self._receive_into(view)
        if count == 0:
            raise EOFError("the channel was closed")
        return count


def _send_all(sock: socket.socket, parts: Parts, waited: Callable[[], None] | None) -> None:
    while parts:
        try:
            sent = sock.sendmsg(parts[:_MAX_PARTS])
        except (BlockingIOError, TimeoutError):
            if waited is None:
                raise
            waited()
            continue
        _advance(parts, sent)


def send_what_fits(sock: socket.socket, parts: Parts) -> None:
    """Send what the socket takes of `parts` now, without waiting, and drop it from them;
    OSError as the socket raises it."""
    while parts:
        try:
            sent = sock.sendmsg(parts[:_MAX_PARTS], [], socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        _advance(parts, sent)


def _advance(parts: Parts, sent: int) -> None:
    while parts and sent >= parts[0].nbytes:
        sent -= parts[0].nbytes
        parts.pop(0)
    if parts and sent:
        parts[0] = parts[0][sent:]
