"""Descriptor messages between a front-end worker and the core over a Unix stream socket: the
frame format and the batching asyncio `Channel` (the arenas' descriptors are passed when the core
starts the worker, as inherited file descriptors).

A frame is a 4-byte little-endian body length and the body, `marshal` of one message: a tuple of
plain values (str, int, float, bool, bytes, None, and tuples, lists and dicts of those). marshal
encodes such tuples as fast as pickle or faster, and cannot name a class or run code on load;
objects it cannot encode raise ValueError at `send`, but any buffer (a NumPy array, a memoryview)
is copied in as bytes, so keep tensors out of messages. It is still not meant for hostile input:
the socket is private to the server's own processes (a socketpair made by the core), so every
frame read is trusted. Tensors never travel here, only their offsets in an
arena (`server.workers.arena`), or as bytes inline in the rare case an arena is full.
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from collections.abc import Callable
from typing import Any, cast

Message = tuple[Any, ...]  # plain values only, see the module docstring

DEFAULT_MAX_FRAME_BYTES = 1 << 30  # a body above this is refused; the header allows 2**32 - 1

_HEADER = struct.Struct("<I")
_HEADER_BYTES = _HEADER.size
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
    connection, and `on_lost` receives it. `send` never waits: what one side sends is bounded
    by the requests in flight (a worker's requests, the core's answers to them).
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
        self._loop: asyncio.AbstractEventLoop | None = None  # the transport's, once connected
        self._pending: list[bytes] = []  # frames sent since the last flush
        self._flush_scheduled = False
        self._buffer = bytearray()  # the start of a frame not yet complete
        self._needed_bytes = _HEADER_BYTES  # parse again once the buffer holds this many

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the methods of asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        # Kept: under CPython 3.11 each `asyncio.get_running_loop()` makes a getpid system call.
        self._loop = asyncio.get_running_loop()

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
            assert self._loop is not None  # set with the transport
            self._loop.call_soon(self._flush)

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

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._pending.clear()
        if exc is None and self._buffer:
            exc = ConnectionError(
                f"peer closed in the middle of a frame ({len(self._buffer)} bytes)"
            )
        self._on_lost(exc)
