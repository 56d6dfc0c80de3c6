"""`Connection`: one HTTP/1.1 client connection, parsed by httptools (uvicorn's parser): its
requests are read (pipelined ones queued) and answered one at a time, in order, each through its
server (`transport.HttpServer`); a message too large or malformed is answered with a refusal."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from http import HTTPStatus
from typing import Any, Protocol

import httptools
import msgspec

from server.contract.numbers import is_digits
from server.frontend.http.messages import Headers, Response, Streamed

_MAX_PIPELINED = 16  # requests parsed ahead of their answer before reading pauses
MAX_HEAD_BYTES = 64 * 1024  # a request's target and headers together, at most
# Chunks of one chunked body, at most, as Triton caps them (server #8770): each one costs a
# callback and a piece kept until the body is whole, whatever its size.
MAX_CHUNKS = 1 << 16
TOO_MANY_CHUNKS = f"the chunked request body has more than {MAX_CHUNKS} chunks"
_PHRASES = {status.value: status.phrase for status in HTTPStatus}


class _HeadTooLarge(Exception):
    """Raised inside the parser's callbacks to stop it; the parser wraps it in its own error."""


class Parsed(msgspec.Struct, frozen=True):
    """One request as parsed, or the refusal of a message that could not be."""

    method: str
    url: bytes
    headers: Headers
    body: bytes
    too_large: bool
    keep_alive: bool
    refusal: str | None = None  # a malformed message: answered 400, then the connection closes


class Server(Protocol):
    """What a connection asks of the server it belongs to."""

    connections: set[Connection]  # open now
    closing: bool  # draining: every answer closes its connection
    max_connection_age_s: float | None  # a connection's answers close it after this long
    max_body_bytes: int  # a body larger than this (inflated) is refused unread

    def answer(self, connection: Connection, parsed: Parsed) -> None:
        """Start answering `parsed` (a task, which calls `connection.answer`)."""

    async def respond(
        self, parsed: Parsed, connection: Connection | None = None
    ) -> Response | Streamed:
        """The answer to one parsed request."""

    def date(self) -> str:
        """The Date header's value now."""


class Connection(asyncio.Protocol):
    """One client connection: parses its requests and answers them in order."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._pending: deque[Parsed] = deque()  # parsed, waiting for the answer before them
        self._busy = False  # an answer is under way
        self._writable: asyncio.Future[None] | None = None  # set while the transport is full
        # The answer under way to an inference request: a client that leaves cancels it, so a
        # request still queued is never executed and a stream's model sees is_cancelled(), with
        # or without an event sent yet. Other requests (a model's load) finish.
        self.cancellable: asyncio.Task[Any] | None = None
        self.idle_since_s: float | None = None  # None: a request is being read or answered
        self._reading = False  # a request's first bytes have come and its last have not
        self._read_s = 0.0  # when bytes last came (monotonic)
        self._last = False  # after an upgrade request: it is answered, then the connection closes
        self._close_at_s: float | None = None  # when the connection has lived its age
        # The message being read.
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size_bytes = 0
        self._head_bytes = 0
        self._too_large = False
        self._chunks = 0  # chunk headers of the body being read, its last (empty) one too

    # asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._server.connections.add(self)
        self.idle_since_s = time.monotonic()
        age_s = self._server.max_connection_age_s
        self._close_at_s = None if age_s is None else self.idle_since_s + age_s

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._server.connections.discard(self)
        self._pending.clear()
        if self.cancellable is not None:
            self.cancellable.cancel()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def data_received(self, data: bytes) -> None:
        self._read_s = time.monotonic()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request was read, but the parser reads nothing after an upgrade: its answer
            # (the upgrade not taken) is the connection's last.
            self._last = True
            if self._transport is not None:
                self._transport.pause_reading()
        except httptools.HttpParserError as exc:
            if self._head_bytes > MAX_HEAD_BYTES:  # raised by a callback of ours
                refusal = f"the request's target and headers exceed {MAX_HEAD_BYTES} bytes"
            else:
                refusal = f"bad request: {exc}"
            self._queue(Parsed("", b"", Headers([]), b"", False, False, refusal))
            if self._transport is not None:
                self._transport.pause_reading()  # nothing after it can be parsed

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # httptools' callbacks

    def on_message_begin(self) -> None:
        self.idle_since_s = None
        self._reading = True
        self._url = b""
        self._headers = []
        self._body = []
        self._size_bytes = 0
        self._head_bytes = 0
        self._too_large = False
        self._chunks = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value))
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def _count_head(self, nbytes: int) -> None:
        self._head_bytes += nbytes
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge()  # the parser stops; the answer is a refusal

    def on_headers_complete(self) -> None:
        for name, value in self._headers:
            lowered = name.lower()
            if lowered == "expect" and value.lower() == "100-continue":
                if not self._busy and not self._pending and self._transport is not None:
                    self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            elif lowered == "content-length" and is_digits(value):
                self._too_large = int(value) > self._server.max_body_bytes

    def on_chunk_header(self) -> None:
        self._chunks += 1
        if self._chunks > MAX_CHUNKS + 1:  # the last, empty chunk is not counted
            self._body = []  # the rest is read and dropped

    def on_body(self, body: bytes) -> None:
        if self._too_large or self._chunks > MAX_CHUNKS + 1:
            return  # read and dropped: the answer is a refusal
        self._size_bytes += len(body)
        if self._size_bytes > self._server.max_body_bytes:
            self._too_large = True
            self._body = []
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._reading = False
        method = self._parser.get_method().decode("latin-1")
        keep_alive = self._parser.should_keep_alive()
        body = b"".join(self._body)
        self._body = []
        refusal = TOO_MANY_CHUNKS if self._chunks > MAX_CHUNKS + 1 else None
        self._queue(
            Parsed(
                method,
                self._url,
                Headers(self._headers),
                body,
                self._too_large,
                keep_alive,
                refusal,
            )
        )

    # answering

    def _queue(self, parsed: Parsed) -> None:
        self._pending.append(parsed)
        if not self._busy:
            self._next()
        elif len(self._pending) >= _MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()

    def _next(self) -> None:
        self._busy = True
        self._server.answer(self, self._pending.popleft())

    async def answer(self, parsed: Parsed) -> None:
        keep_alive = parsed.keep_alive and parsed.refusal is None
        try:
            response = await self._server.respond(parsed, self)
            # A stopping server says so, as does a connection that can read no more or has
            # lived its age.
            keep_alive = keep_alive and not self._server.closing and not self._last
            if self._close_at_s is not None and time.monotonic() >= self._close_at_s:
                keep_alive = False
            if isinstance(response, Streamed):
                await self._stream(response, keep_alive)
            else:
                self._write(response, keep_alive)
            if self._writable is not None:
                await self._writable
        finally:
            self._busy = False
            self.cancellable = None
            transport = self._transport
            if transport is not None:
                if not keep_alive:
                    transport.close()
                elif self._pending:
                    if len(self._pending) < _MAX_PIPELINED:
                        transport.resume_reading()
                    self._next()
                else:
                    self.idle_since_s = time.monotonic()

    def _head(self, status: int, content_type: str | None, keep_alive: bool) -> list[str]:
        head = [f"HTTP/1.1 {status} {_PHRASES.get(status, '')}\r\nDate: {self._server.date()}\r\n"]
        if content_type is not None:
            head.append(f"Content-Type: {content_type}\r\n")
        if not keep_alive:
            head.append("Connection: close\r\n")
        return head

    def _write(self, response: Response, keep_alive: bool) -> None:
        if self._transport is None:
            return  # the client left; the answer goes nowhere
        head = self._head(response.status, response.content_type, keep_alive)
        head.extend(f"{name}: {value}\r\n" for name, value in response.headers)
        head.append(f"Content-Length: {len(response.body)}\r\n\r\n")
        self._transport.writelines((("".join(head)).encode("latin-1"), response.body))

    async def _stream(self, streamed: Streamed, keep_alive: bool) -> None:
        chunks = streamed.chunks
        try:
            if self._transport is None:
                return
            head = self._head(streamed.status, streamed.content_type, keep_alive)
            head.extend(f"{name}: {value}\r\n" for name, value in streamed.headers)
            head.append("Transfer-Encoding: chunked\r\n\r\n")
            self._transport.write(("".join(head)).encode("latin-1"))
            async for chunk in chunks:
                if self._transport is None:
                    return  # the client left mid-stream
                if chunk:
                    self._transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
                    if self._writable is not None:
                        await self._writable
            if self._transport is not None:
                self._transport.write(b"0\r\n\r\n")
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()

    def close_if_stalled(self, before_s: float) -> None:
        """Close the connection if a request is being read, none is being answered, and its
        last bytes came before `before_s` (monotonic)."""
        stalled = self._reading and not self._busy and self._read_s < before_s
        if stalled and self._transport is not None:
            self._transport.close()

    def close_if_idle(self) -> None:
        if not self._busy and self._transport is not None and self.idle_since_s is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
