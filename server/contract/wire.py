"""Descriptor messages between a front-end worker and the core over a Unix stream socket: the
frame format, the batching asyncio `Channel`, and the handshake that passes arena descriptors.

A frame is a 4-byte little-endian body length and the body, `marshal` of one message: a tuple of
plain values (str, int, float, bool, bytes, None, and tuples, lists and dicts of those). marshal
encodes such tuples as fast as pickle or faster, and cannot name a class or run code on load;
objects it cannot encode raise ValueError at `send`, but any buffer (a NumPy array, a memoryview)
is copied in as bytes, so keep tensors out of messages. It is still not meant for hostile input:
the socket is private to the server's own processes (a socketpair, or a 0600 path in a private
directory), so every frame read is trusted. Tensors never travel here, only their offsets in an
arena (`server.contract.arena`), or as bytes inline in the rare case an arena is full.
"""

from __future__ import annotations

import array
import asyncio
import marshal
import os
import socket
import struct
from collections.abc import Callable, Sequence
from typing import Any, cast

Message = tuple[Any, ...]  # plain values only, see the module docstring

DEFAULT_MAX_FRAME_BYTES = 1 << 30  # a body above this is refused; the header allows 2**32 - 1

_HEADER = struct.Struct("<I")
_HEADER_BYTES = _HEADER.size
_INT_BYTES = array.array("i").itemsize  # a descriptor in SCM_RIGHTS data
# Version 2 has no back-references: each message a little longer, but dumps and loads do not
# track every object they meet (about 0.2 us less each on a request's descriptor).
_MARSHAL_VERSION = 2


def encode(message: Message, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One frame: header and body. ValueError for a value marshal cannot encode or a body over
    `max_frame_bytes`."""
    body = marshal.dumps(message, _MARSHAL_VERSION)
    size = len(body)
    if size > max_frame_bytes:
        raise ValueError(f"message of {size} bytes exceeds {max_frame_bytes} bytes")
    return _HEADER.pack(size) + body


class Channel(asyncio.Protocol):
    """One end of the socket: `send` queues messages and writes every message sent in one
    event-loop iteration with one `transport.write`; `on_message` gets each message received, in
    order; `on_lost` gets the reason the connection ended (None for the peer closing cleanly).

    Use it from the event loop's thread only. An exception raised by `on_message` ends the
    connection, and `on_lost` receives it. `send` never waits: a producer that can outrun its
    peer awaits `drain()`, which returns once the transport's buffer is back under its
    high-water mark.
    """

    def __init__(
        self,
        on_message: Callable[[Message], object],
        on_lost: Callable[[Exception | None], object],
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        if not 0 < max_frame_bytes < 1 << 32:
            raise ValueError(f"max_frame_bytes must be below 2**32, not {max_frame_bytes}")
        self.flush_count = 0  # transport writes so far: one per loop iteration that sent
        self._on_message = on_message
        self._on_lost = on_lost
        self._max_frame_bytes = max_frame_bytes
        self._transport: asyncio.Transport | None = None
        self._lost = False
        self._pending: list[bytes] = []  # frames sent since the last flush
        self._flush_scheduled = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._buffer = bytearray()  # the start of a frame not yet complete
        self._needed_bytes = _HEADER_BYTES  # parse again once the buffer holds this many

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods of asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def send(self, message: Message) -> None:
        """Queue `message` for this loop iteration's write; it is encoded now (`encode`'s
        ValueError). ConnectionError once the connection is closed or lost."""
        frame = encode(message, self._max_frame_bytes)
        transport = self._transport
        if transport is None or transport.is_closing():
            raise ConnectionError("channel is not connected")
        self._pending.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Write what is queued, then wait while the transport is paused (peer not reading)."""
        self._flush()
        if self._lost:
            raise ConnectionError("channel connection lost")
        if not self._paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def close(self) -> None:
        """Write what is queued and close; `on_lost(None)` follows."""
        self._flush()
        if self._transport is not None:
            self._transport.close()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._pending or self._transport is None or self._transport.is_closing():
            return
        self._transport.write(b"".join(self._pending))
        self._pending.clear()
        self.flush_count += 1

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._needed_bytes:
                return
            consumed = self._parse(buffer)
            del buffer[:consumed]  # bytearray drops its front without moving the rest
        else:
            consumed = self._parse(data)
            if consumed < len(data):
                buffer += memoryview(data)[consumed:]

    def _parse(self, data: bytes | bytearray) -> int:
        """Hand every complete frame in `data` to `on_message`; the bytes consumed."""
        end = len(data)
        position = 0
        with memoryview(data) as view:
            while end - position >= _HEADER_BYTES:
                (size,) = _HEADER.unpack_from(view, position)
                if size > self._max_frame_bytes:
                    raise ConnectionError(
                        f"peer sent a frame of {size} bytes, over {self._max_frame_bytes} bytes"
                    )
                start = position + _HEADER_BYTES
                if start + size > end:
                    self._needed_bytes = _HEADER_BYTES + size
                    return position
                message = marshal.loads(view[start : start + size])
                position = start + size
                self._on_message(message)
        self._needed_bytes = _HEADER_BYTES
        return position

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drainers(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._transport = None
        self._pending.clear()
        if exc is None and self._buffer:
            exc = ConnectionError(
                f"peer closed in the middle of a frame ({len(self._buffer)} bytes)"
            )
        self._wake_drainers(ConnectionError("channel connection lost"))
        self._on_lost(exc)

    def _wake_drainers(self, exc: Exception | None) -> None:
        for waiter in self._drain_waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)
        self._drain_waiters.clear()


def send_with_fds(sock: socket.socket, message: Message, fds: Sequence[int] = ()) -> None:
    """Send one frame with `fds` attached, on a connected blocking Unix socket (a handshake,
    before asyncio takes the socket). The receiver gets duplicates; `fds` stay open here."""
    frame = encode(message)
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    sent = sock.sendmsg([frame], rights if fds else [])
    sock.sendall(memoryview(frame)[sent:])


def recv_with_fds(
    sock: socket.socket, max_fds: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> tuple[Message, list[int]]:
    """Receive one frame sent by `send_with_fds` and the descriptors attached to it, which the
    caller owns (close-on-exec). Reads exactly one frame, so the socket can go on to a Channel."""
    # CMSG_LEN, not CMSG_SPACE: its padding could hold one descriptor more than asked for.
    header, ancillary, flags, _ = sock.recvmsg(
        _HEADER_BYTES, socket.CMSG_LEN(max_fds * _INT_BYTES), socket.MSG_CMSG_CLOEXEC
    )
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % _INT_BYTES])
    try:
        if flags & socket.MSG_CTRUNC or len(fds) > max_fds:
            raise ConnectionError(f"peer sent more than {max_fds} descriptors")
        header += _recv_exactly(sock, _HEADER_BYTES - len(header))
        (size,) = _HEADER.unpack(header)
        if size > max_frame_bytes:
            raise ConnectionError(f"peer sent a frame of {size} bytes, over {max_frame_bytes}")
        message = marshal.loads(_recv_exactly(sock, size))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return message, fds.tolist()


def _recv_exactly(sock: socket.socket, nbytes: int) -> bytearray:
    received = bytearray(nbytes)
    with memoryview(received) as view:
        position = 0
        while position < nbytes:
            count = sock.recv_into(view[position:])
            if count == 0:
                raise ConnectionError(f"peer closed with {nbytes - position} bytes of a frame due")
            position += count
    return received
