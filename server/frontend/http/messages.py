"""What an HTTP handler takes and gives: the request (its headers looked up case-insensitively),
a whole response or a streamed one, and the route table that picks the handler for a path."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import msgspec


class Headers(Mapping[str, str]):
    """A request's headers: names as the client wrote them, looked up in any case; of a name sent
    twice, a lookup sees the first."""

    __slots__ = ("_by_name", "pairs")

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs  # every header in order, repeated names too
        self._by_name: dict[str, str] = {}
        for name, value in pairs:
            self._by_name.setdefault(name.lower(), value)

    def __getitem__(self, name: str) -> str:
        return self._by_name[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


class Request(msgspec.Struct, frozen=True):
    """One request, its body whole (inflated when it came compressed)."""

    method: str
    path: str  # as sent, without the query
    headers: Headers
    body: bytes
    match_info: Mapping[str, str]  # the route's {placeholders}, percent-decoded


class Response(msgspec.Struct, frozen=True):
    """A whole response."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # besides Content-Type and Content-Length


class Streamed(msgspec.Struct, frozen=True):
    """A response sent as its chunks come (chunked transfer encoding); empty chunks send
    nothing."""

    status: int
    content_type: str
    chunks: AsyncIterator[bytes]
    headers: tuple[tuple[str, str], ...] = ()  # besides Content-Type and Transfer-Encoding


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(value).encode(), "application/json")


Handler = Callable[[Request], Awaitable[Response | Streamed]]
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
_RESOLVED = 1024  # (method, path) answers a router keeps


@dataclass(frozen=True, slots=True)
class _Route:
    segments: tuple[str, ...]  # literal segments, or "{name}" for a placeholder
    handlers: dict[str, Handler] = field(default_factory=dict)  # by method


class Router:
    """Paths like `/v2/models/{model}/infer` to handlers by method; a placeholder takes one path
    segment. Routes are tried in the order added, among those with the path's segment count;
    the `_RESOLVED` answers used last are kept (a client asks the same few paths again and
    again)."""

    def __init__(self) -> None:
        self._routes: dict[int, list[_Route]] = {}
        self._resolved = functools.lru_cache(maxsize=_RESOLVED)(self._match)
        self._leaving: set[Handler] = set()  # handlers whose answer ends when the client leaves

    def add(
        self, method: str, template: str, handler: Handler, *, ends_with_client: bool = False
    ) -> None:
        """`ends_with_client`: a client that leaves cancels the answer (inference: nobody is
        left to answer); otherwise the answer finishes (a model's load, say)."""
        self._resolved.cache_clear()
        if ends_with_client:
            self._leaving.add(handler)
        segments = tuple(template.split("/"))
        routes = self._routes.setdefault(len(segments), [])
        for route in routes:
            if route.segments == segments:
                route.handlers[method] = handler
                return
        routes.append(_Route(segments, {method: handler}))

    def ends_with_client(self, handler: Handler) -> bool:
        return handler in self._leaving

    def resolve(self, method: str, path: str) -> tuple[Handler, Mapping[str, str]] | int:
        """The handler and its placeholders' values; NOT_FOUND, or METHOD_NOT_ALLOWED for a
        path that other methods serve."""
        return self._resolved(method, path)

    def _match(self, method: str, path: str) -> tuple[Handler, Mapping[str, str]] | int:
        parts = path.split("/")
        found_path = False
        for route in self._routes.get(len(parts), ()):
            values = _match(route.segments, parts)
            if values is None:
                continue
            handler = route.handlers.get(method)
            if handler is not None:
                return handler, values
            found_path = True
        return METHOD_NOT_ALLOWED if found_path else NOT_FOUND


def _match(segments: tuple[str, ...], parts: list[str]) -> dict[str, str] | None:
    values = {}
    for segment, part in zip(segments, parts, strict=True):
        if segment.startswith("{"):
            if not part:
                return None
            values[segment[1:-1]] = unquote(part)
        elif segment != part:
            return None
    return values
