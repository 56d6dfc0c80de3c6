"""What a front-end worker hands the core as its client sent it, for both front ends: an
inference request's bytes in, its answer's bytes out (server.frontend.grpc.forward,
server.frontend.http.forward); the worker then parses, decodes and encodes nothing, and its own
work per request is its protocol's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import msgspec

from server.contract.load import LoadReport


class SerializedAnswer(msgspec.Struct, frozen=True):
    """A request's answer as its front end sends it, and the model's load when the request
    asked for it (a record of every request: a struct, built in C)."""

    data: bytes
    load: LoadReport | None = None
    header_length: int | None = None  # HTTP's Inference-Header-Content-Length (binary data)


class SerializedInfer(Protocol):
    """Serves inference requests from their bytes (a front-end worker's way to the core)."""

    async def infer_serialized(
        self, data: bytes, deadline_ns: int, load_report: bool
    ) -> SerializedAnswer:
        """`data`: the ModelInferRequest as its client sent it; `deadline_ns`: when its client
        stops waiting (`time.monotonic_ns()`; 0: never); `load_report`: a balancer asked for
        the model's load. Raises only `ServerError`s."""
        ...

    def infer_serialized_stream(
        self, data: bytes, deadline_ns: int, load_format: str | None
    ) -> AsyncIterator[bytes]:
        """One request of a ModelStreamInfer as its client sent it: each of its
        ModelStreamInferResponses, serialized, failures in-band. `load_format`: the stream's
        `orca.metadata_format` (None: no load report). Raises only `ServerError`s, for a
        request refused before it reached the core."""
        ...

    async def infer_http(
        self,
        model: str,
        version: str,
        body: bytes,
        header_length: str | None,
        load_report: bool,
    ) -> SerializedAnswer:
        """An HTTP infer request of `model` (`version`: "" for the newest) as its client sent
        its body (`header_length`: its Inference-Header-Content-Length header); the answer's
        body, with its own header length when it carries binary data. Raises only
        `ServerError`s."""
        ...
