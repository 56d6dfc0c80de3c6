"""`HttpServer`: Triton's HTTP/REST routes over HTTP/1.1 on asyncio. It listens, answers each
request its connections parse (`connection.Connection`, one at a time per connection, in order)
through the router, with its body inflated when it came gzip or deflate encoded and refused past
the size limit, and closes idle connections. Measured on the 2-core machine with a canned
answer: about 50k requests/s against aiohttp's 8k, which cost more per request than Convoy's
own path."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from email.utils import formatdate

import httptools

from server.frontend.http.connection import Connection, Parsed
from server.frontend.http.messages import (
    NOT_FOUND,
    Request,
    Response,
    Router,
    Streamed,
    json_response,
)

_log = logging.getLogger(__name__)

KEEPALIVE_S = 75.0  # an idle keep-alive connection closes after this long, as aiohttp's
_SWEEP_S = 5.0  # how often idle connections are looked for
# A request whose next bytes take longer than this is dropped with its connection, as nginx's
# client_header_timeout and client_body_timeout: a client that sends half a request and waits
# (slowloris) holds its connection no longer.
STALLED_READ_S = 60.0
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}


class _BodyTooLarge(Exception):
    pass


class HttpServer:
    """Serves `router` on one port; `stop` lets the requests being answered finish."""

    def __init__(
        self,
        router: Router,
        max_body_bytes: int,
        too_large_message: str,
        max_connection_age_s: float | None = None,
        stalled_read_s: float = STALLED_READ_S,
    ) -> None:
        self._router = router
        self._stalled_read_s = stalled_read_s
        # After this long, a connection's next answer closes it, so that the client's next
        # request opens one the kernel deals again among the processes on a shared port.
        self.max_connection_age_s = max_connection_age_s
        self.max_body_bytes = max_body_bytes  # after inflating
        self._too_large_message = too_large_message
        self.connections: set[Connection] = set()  # open now
        self._answering: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set by `start`
        self._sweeper: asyncio.Task[None] | None = None
        self.closing = False
        self._date = ("", 0.0)  # the Date header's value, and when it was made

    async def start(self, host: str, port: int, reuse_port: bool = False) -> int:
        """Listen on host:port (0 picks a free port); returns the port bound. With `reuse_port`,
        other processes may serve the same port (SO_REUSEPORT)."""
        # Kept: under CPython 3.11 each `asyncio.get_running_loop()` makes a getpid system call.
        self._loop = loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, reuse_port=reuse_port or None, backlog=1024
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

    def answer(self, connection: Connection, parsed: Parsed) -> None:
        assert self._loop is not None  # connections come only once started
        task = self._loop.create_task(connection.answer(parsed))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def respond(
        self, parsed: Parsed, connection: Connection | None = None
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
        every_s = min(_SWEEP_S, self._stalled_read_s)
        while True:
            await asyncio.sleep(every_s)
            now_s = time.monotonic()
            idle_since_s, stalled_since_s = now_s - KEEPALIVE_S, now_s - self._stalled_read_s
            for connection in list(self.connections):
                if connection.idle_since_s is not None and connection.idle_since_s < idle_since_s:
                    connection.close_if_idle()
                else:
                    connection.close_if_stalled(stalled_since_s)


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
