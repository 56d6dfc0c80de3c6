"""`HttpServer`: HTTP/1.1 on asyncio, parsed by httptools (uvicorn's parser), under Triton's
HTTP/REST routes. A connection answers its requests one at a time, in order (keep-alive and
pipelining); a body is read whole, inflated when it came gzip or deflate encoded, and refused past
the size limit without being kept. Measured on the 2-core machine with a canned answer: about 50k
requests/s against aiohttp's 8k, which cost more per request than Convoy's own path."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import deque
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

import httptools
import msgspec

from server.contract.numbers import is_digits
from server.frontend.http.messages import (
    NOT_FOUND,
    Headers,
    Request,
    Response,
    Router,
    Streamed,
    json_response,
)

_log = logging.getLogger(__name__)

KEEPALIVE_S = 75.0  # an idle keep-alive connection closes after this long, as aiohttp's
_SWEEP_S = 5.0  # how often idle connections are looked for
_MAX_PIPELINED = 16  # requests parsed ahead of their answer before reading pauses
MAX_HEAD_BYTES = 64 * 1024  # a request's target and headers together, at most
# Chunks of one chunked body, at most, as Triton caps them (server #8770): each one costs a
# callback and a piece kept until the body is whole, whatever its size.
MAX_CHUNKS = 1 << 16
TOO_MANY_CHUNKS = f"the chunked request body has more than {MAX_CHUNKS} chunks"
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}


class _BodyTooLarge(Exception):
    pass


class _HeadTooLarge(Exception):
    """Raised inside the parser's callbacks to stop it; the parser wraps it in its own error."""


class _Parsed(msgspec.Struct, frozen=True):
    """One request as parsed, or the refusal of a message that could not be."""

    method: str
    url: bytes
    headers: Headers
    body: bytes
    too_large: bool
    keep_alive: bool
    refusal: str | None = None  # a malformed message: answered 400, then the connection closes


class HttpServer:
    """Serves `router` on one port; `stop` lets the requests being answered finish."""

    def __init__(
        self,
        router: Router,
        max_body_bytes: int,
        too_large_message: str,
        max_connection_age_s: float | None = None,
    ) -> None:
        self._router = router
        # After this long, a connection's next answer closes it, so that the client's next
        # request opens one the kernel deals again among the processes on a shared port.
        self.max_connection_age_s = max_connection_age_s
        self.max_body_bytes = max_body_bytes  # after inflating
        self._too_large_message = too_large_message
        self.connections: set[_Connection] = set()  # open now
        self._answering: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.closing = False
        self._date = ("", 0.0)  # the Date header's value, and when it was made

    async def start(self, host: str, port: int, reuse_port: bool = False) -> int:
        """Listen on host:port (0 picks a free port); returns the port bound. With `reuse_port`,
        other processes may serve the same port (SO_REUSEPORT)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), host, port, reuse_port=reuse_port or None, backlog=1024
        )
        self._sweeper = loop.create_task(self._sweep())
        return int(self._server.sockets[0].getsockname()[1])

    def drain(self) -> None:
        """Stop listening (a new connection is refused); an idle connection closes now, a busy
        one after its answer, which says `Connection: close`."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_if_idle()

    @property
    def answering(self) -> int:
        """Requests being answered now."""
        return len(self._answering)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Drain, let the answers under way finish (bounded), then close every connection."""
        self.drain()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._answering:
            await asyncio.wait(set(self._answering), timeout=grace_s)
        for connection in list(self.connections):
            connection.abort()

    def date(self) -> str:
        value, made_s = self._date
        now_s = time.time()
        if now_s - made_s >= 1.0:
            value = formatdate(now_s, usegmt=True)
            self._date = (value, now_s)
        return value

    def answer(self, connection: _Connection, parsed: _Parsed) -> None:
        task = asyncio.get_running_loop().create_task(connection.answer(parsed))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def respond(
        self, parsed: _Parsed, connection: _Connection | None = None
    ) -> Response | Streamed:
        """The answer to one parsed request; refusals of the transport are `{"error": ...}`.
        An answer the router lets its client's leaving cancel is `connection`'s to cancel."""
        if parsed.refusal is not None:
            return json_response({"error": parsed.refusal}, 400)
        try:
            path = (httptools.parse_url(parsed.url).path or b"/").decode("latin-1")
        except httptools.HttpParserInvalidURLError:
            return json_response({"error": f"malformed request target {parsed.url!r:.80}"}, 400)
        found = self._router.resolve(parsed.method, path)
        if isinstance(found, int):
            words = "Not Found" if found == NOT_FOUND else "Method Not Allowed"
            return json_response({"error": f"{words}: {parsed.method} {path}"}, found)
        if parsed.too_large:
            return json_response({"error": self._too_large_message}, 400)
        try:
            encoding = parsed.headers.get("Content-Encoding")
            body = _inflated(parsed.body, encoding, self.max_body_bytes)
        except _BodyTooLarge:
            return json_response({"error": self._too_large_message}, 400)
        except (ValueError, zlib.error) as exc:
            return json_response({"error": f"the request body cannot be decoded: {exc}"}, 400)
        handler, match_info = found
        if connection is not None and self._router.ends_with_client(handler):
            connection.cancellable = asyncio.current_task()
        request = Request(parsed.method, path, parsed.headers, body, match_info)
        try:
            return await handler(request)
        except Exception as exc:  # a handler maps its own errors: this one is unexpected
            _log.exception("%s %s failed unexpectedly", parsed.method, path)
            return json_response({"error": f"internal error: {exc}"}, 500)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            idle_since_s = time.monotonic() - KEEPALIVE_S
            for connection in list(self.connections):
                if connection.idle_since_s is not None and connection.idle_since_s < idle_since_s:
                    connection.close_if_idle()


def _inflated(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body as sent, or inflated (never more than `limit` bytes of it in memory)."""
    coding = "identity" if encoding is None else encoding.strip().lower()
    if coding == "identity":
        return body
    wbits = _WBITS.get(coding)
    if wbits is None:
        raise ValueError(f"Content-Encoding '{encoding}' is not supported (gzip or deflate)")
    inflater = zlib.decompressobj(wbits)
    inflated = inflater.decompress(body, limit + 1)
    if len(inflated) > limit:
        raise _BodyTooLarge()
    if not inflater.eof:
        raise ValueError("the compressed body ends early")
    return inflated


class _Connection(asyncio.Protocol):
    """One client connection: parses its requests and answers them in order."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._pending: deque[_Parsed] = deque()  # parsed, waiting for the answer before them
        self._busy = False  # an answer is under way
        self._writable: asyncio.Future[None] | None = None  # set while the transport is full
        # The answer under way to an inference request: a client that leaves cancels it, so a
        # request still queued is never executed and a stream's model sees is_cancelled(), with
        # or without an event sent yet. Other requests (a model's load) finish.
        self.cancellable: asyncio.Task[Any] | None = None
        self.idle_since_s: float | None = None  # None: a request is being read or answered
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
            self._queue(_Parsed("", b"", Headers([]), b"", False, False, refusal))
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
        method = self._parser.get_method().decode("latin-1")
        keep_alive = self._parser.should_keep_alive()
        body = b"".join(self._body)
        self._body = []
        refusal = TOO_MANY_CHUNKS if self._chunks > MAX_CHUNKS + 1 else None
        self._queue(
            _Parsed(
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

    def _queue(self, parsed: _Parsed) -> None:
        self._pending.append(parsed)
        if not self._busy:
            self._next()
        elif len(self._pending) >= _MAX_PIPELINED and self._transport is not None:
            self._transport.pause_reading()

    def _next(self) -> None:
        self._busy = True
        self._server.answer(self, self._pending.popleft())

    async def answer(self, parsed: _Parsed) -> None:
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

    def close_if_idle(self) -> None:
        if not self._busy and self._transport is not None and self.idle_since_s is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
