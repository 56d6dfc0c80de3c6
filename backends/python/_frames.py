"""The framing both ends of a python worker's channel use: a socket for messages, shared memory
for the arrays in them.

Loaded by path in the worker (`_worker.py` imports nothing from Convoy), as a package module in
the server.

A message is a protocol-5 pickle whose arrays are out-of-band buffers, so the pickle holds only
their shapes and dtypes; a BYTES tensor (an object array of bytes) travels the same way, as its
items' lengths and their concatenation, rebuilt by `bytes_tensor`. Each direction has a `Ring`:
a memfd both processes map, where the sender copies a message's buffers and the socket carries
their offsets and lengths only. The receiver releases a message's space in the order the
messages came; buffers that do not fit (the ring is full, or smaller than they are) travel
inline on the socket instead, so a sender never waits for space.

Who keeps what: the server copies what it receives out of the ring at once (its answers live on
after the worker's next batch). The worker hands the arrays of what the server leases (an
execute message's inputs, and the outputs of the BLS calls its model makes meanwhile) to the
model as they lie in the ring, without a copy, and releases them once the batch is answered: for
a model that is not decoupled when it sends "done" or "failed", for a decoupled one when,
besides, every request has sent its final flag. What a model keeps of them after that must be a
copy.
"""

from __future__ import annotations

import collections
import contextlib
import io
import mmap
import os
import pickle
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RING_BYTES = 64 << 20  # each direction's shared memory; pages are touched only as used
_ALIGN = 64
_TAIL = struct.Struct("<Q")  # at offset 0: how far the receiver has released
_DATA_START = _ALIGN
_HEADER = struct.Struct("<IQQB")  # buffer count, pickle length, ring end, lease (below)
# What the worker may keep in the ring until the batch is answered: an execute message's inputs
# (a new batch), a BLS call's outputs (the batch executing now).
LEASE_NONE, LEASE_NEW_BATCH, LEASE_TO_BATCH = 0, 1, 2
_BUFFER = struct.Struct("<QQ")  # one buffer's length, its ring offset + 1 (0: inline)
_MAX_PARTS = 512  # buffers per sendmsg, well under the kernel's IOV_MAX
# Tensors up to this size travel stacked with their batch-mates' (`stack_rows`): below it, an
# array's own cost on the channel outweighs copying it once more.
_STACKED_BYTES = 16 << 10


# This module's name in a worker (loaded by path) and in the server: a pickle names
# `bytes_tensor` by either.
_MODULE_NAMES = frozenset({"convoy_python_frames", "backends.python._frames"})


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


def bytes_tensor(shape: tuple[int, ...], lengths: Any, data: Any) -> np.ndarray:
    """A BYTES tensor from its items' lengths and their concatenation (as `_Pickler` sends it)."""
    ends = np.cumsum(np.frombuffer(lengths, dtype="<u8")).tolist()
    blob = bytes(data)
    items = np.empty(len(ends), dtype=object)
    items[:] = [blob[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    return items.reshape(shape)


Parts = list[memoryview]  # a message's bytes to send, in order
Stacked = tuple[list[str], list[np.ndarray], list[list[int]]]  # names, arrays, rows per map


def stack_rows(maps: list[Any]) -> list[Any] | Stacked:
    """A batch's tensor maps (an execute message's inputs, a "done" message's outputs) as one
    array per name, each map's rows one after the other, when every map is a dict of the same
    names and each name's arrays are small, of one dtype (not objects) and one shape past the
    first axis; otherwise `maps` as they are. Each array of a message costs both ends a few
    microseconds (pickled, placed in the ring, rebuilt), so a batch of small tensors travels
    as a few arrays instead of one per request; a large one would only be copied once more."""
    if len(maps) < 2 or type(maps[0]) is not dict or not maps[0]:
        return maps
    keys = maps[0].keys()
    for tensors in maps:
        if type(tensors) is not dict or tensors.keys() != keys:
            return maps
    names = list(keys)
    arrays, rows = [], []
    for name in names:
        column = [tensors[name] for tensors in maps]
        first = column[0]
        if type(first) is not np.ndarray or first.dtype == object or first.ndim == 0:
            return maps
        for array in column:
            if type(array) is not np.ndarray or array.nbytes > _STACKED_BYTES:
                return maps
        try:  # NumPy checks that they share the dtype and the shape past the first axis
            arrays.append(np.concatenate(column, dtype=first.dtype, casting="no"))
        except (TypeError, ValueError):
            return maps
        rows.append([array.shape[0] for array in column])
    return names, arrays, rows


def unstack_rows(stacked: Any) -> list[dict[str, np.ndarray]]:
    """`stack_rows`' arrays back into one map per request, each array a view of its rows;
    ValueError when `stacked` is not what `stack_rows` makes (the server reads a worker's)."""
    if type(stacked) is not tuple or len(stacked) != 3:
        raise ValueError("stacked tensors are not (names, arrays, rows)")
    names, arrays, rows = stacked
    if not (type(names) is list and type(arrays) is list and type(rows) is list) or not (
        len(names) == len(arrays) == len(rows) > 0
    ):
        raise ValueError("stacked tensors' names, arrays and rows differ in number")
    count = len(rows[0]) if type(rows[0]) is list else -1
    maps: list[dict[str, np.ndarray]] = [{} for _ in range(max(count, 0))]
    for name, array, counts in zip(names, arrays, rows, strict=True):
        if (
            type(name) is not str
            or type(array) is not np.ndarray
            or array.ndim == 0
            or type(counts) is not list
            or len(counts) != count
        ):
            raise ValueError(f"stacked tensor '{name}' does not match its rows")
        start = 0
        for tensors, n in zip(maps, counts, strict=True):
            if type(n) is not int or n < 0:
                raise ValueError(f"stacked tensor '{name}' does not match its rows")
            tensors[name] = array[start : start + n]
            start += n
        if start != array.shape[0]:
            raise ValueError(f"stacked tensor '{name}' does not match its rows")
    return maps


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is not np.ndarray or obj.dtype != object:
            return NotImplemented
        items = obj.ravel().tolist()
        try:
            data = b"".join(items)
        except TypeError:  # not all bytes: pickled as any object array
            return NotImplemented
        lengths = np.fromiter(map(len, items), dtype="<u8", count=len(items))
        return bytes_tensor, (
            obj.shape,
            pickle.PickleBuffer(lengths.data),
            pickle.PickleBuffer(data),
        )


class Unpickler(pickle.Unpickler):
    """Rebuilds a message; `allowed`: the only globals besides `bytes_tensor` it may name (the
    server's, so that a model cannot run code in the server's process), or None for any."""

    def __init__(
        self,
        data: bytes | bytearray,
        buffers: Sequence[Any],
        allowed: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if name == "bytes_tensor" and module in _MODULE_NAMES:
            return bytes_tensor
        if self._allowed is not None and (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"the message names {module}.{name}")
        return super().find_class(module, name)


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
    _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(message)
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


class WorkerChannel:
    """The worker's end: one lock for sends (a decoupled model's threads send too); what an
    execute message leased is released when its batch is answered (see the module's docs)."""

    def __init__(self, sock: socket.socket, incoming: Ring, outgoing: Ring) -> None:
        self._sock = sock
        self._reader = Reader(sock.recv_into)
        self._incoming = incoming
        self._outgoing = outgoing
        self._lock = threading.Lock()
        self._batches: dict[int, _Batch] = {}  # leased batches not yet answered
        self._executing: _Batch | None = None  # the latest; a BLS call's outputs belong to it

    def send(self, message: object) -> None:
        with self._lock:
            batch = self._answered(message)
            if batch is not None:
                # Before the send: the server writes the ring again only after this reply,
                # and the send has read the outputs (which may be the inputs) by then.
                for entry in batch.entries:
                    self._incoming.release(entry)
            if type(message) is tuple and message[0] == "done" and type(message[2]) is list:
                message = (*message[:2], stack_rows(message[2]), *message[3:])
            write_message(self._sock, message, self._outgoing)

    def receive(self) -> Any:
        data, buffers, entry, lease = read_frame(self._reader.read_exact, self._incoming)
        with self._lock:
            batch = self._executing if lease == LEASE_TO_BATCH else None
            if entry is None or (lease != LEASE_NEW_BATCH and batch is None):
                buffers = copied(self._incoming, buffers, entry)
                entry = None
            message = Unpickler(data, buffers).load()
            if message[0] == "execute" and type(message[2]) is tuple:
                message = (*message[:2], unstack_rows(message[2]), *message[3:])
            if entry is not None and lease == LEASE_NEW_BATCH:
                self._executing = self._batches[message[1]] = _Batch([entry], len(message[2]))
            elif entry is not None and batch is not None:
                batch.entries.append(entry)
        return message

    def _answered(self, message: object) -> _Batch | None:
        """The batch `message` completes, if it does."""
        if not isinstance(message, tuple) or len(message) < 3:
            return None
        batch = self._batches.get(message[1])
        if batch is None:
            return None
        if message[0] == "failed":
            batch.returned = batch.decoupled_done = True
        elif message[0] == "done":
            batch.returned = True
            batch.decoupled_done |= message[2] is not None  # payloads: not decoupled
            batch.finals.update(message[4])  # rescheduled: their finals come in a later batch
            batch.decoupled_done |= len(batch.finals) >= batch.requests
        elif message[0] == "response" and message[4]:
            batch.finals.add(message[2])
            batch.decoupled_done = len(batch.finals) >= batch.requests
        if not (batch.returned and batch.decoupled_done):
            return None
        del self._batches[message[1]]
        if batch is self._executing:
            self._executing = None
        return batch


@dataclass(slots=True)
class _Batch:
    """A leased execute message's batch until it is answered."""

    entries: list[list[Any]]  # its ring entries: the execute message's, then its calls'
    requests: int
    finals: set[int] = field(default_factory=set)  # requests that sent their final flag
    returned: bool = False  # "done" or "failed" was sent
    decoupled_done: bool = False  # every request's final flag was sent (or none is due)
