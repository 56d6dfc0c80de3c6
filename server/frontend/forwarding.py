"""Triton's header forwarding (--grpc-header-forward-pattern, --http-header-forward-pattern): a
request's headers whose names match the pattern reach the model as string request parameters;
and Convoy's --fair-share-header, whose value is the request's fair-share class."""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from server.contract.errors import InvalidInputError
from server.contract.requests import RESERVED_PARAMETERS, InferOptions, model_parameters


class HeaderForwarding:
    """Adds the matching headers of a request to its parameters; without a pattern, nothing."""

    def __init__(self, pattern: str | None, share_header: str | None = None) -> None:
        # Triton matches anywhere in the name (RE2::PartialMatch), case as sent: gRPC metadata
        # keys arrive lower-cased, HTTP header names as the client wrote them.
        self._regex = re.compile(pattern) if pattern else None
        # Header names compare case-insensitively (gRPC metadata keys are lower case).
        self._share_header = share_header.lower() if share_header else None

    @property
    def active(self) -> bool:
        """Whether a pattern or a fair-share header was given (without either, a request's
        headers are never read)."""
        return self._regex is not None or self._share_header is not None

    def apply(self, options: InferOptions, headers: Iterable[tuple[str, object]]) -> InferOptions:
        if self._share_header is not None:
            headers = tuple(headers)  # read twice
            wanted = self._share_header
            share = next(
                (v for k, v in headers if isinstance(v, str) and str(k).lower() == wanted), ""
            )
            if share:
                options = msgspec.structs.replace(options, share=share)
        if self._regex is None:
            return options
        regex = self._regex
        found = [(str(k), str(v)) for k, v in headers if isinstance(v, str) and regex.search(k)]
        if not found:
            return options
        for name, _ in found:  # refused as Triton 2.69 refuses them (server #8763)
            if _reserved(name):
                raise InvalidInputError(
                    f"header '{name}' matches the header forward pattern, but '{name}' is a "
                    "parameter key reserved for Triton usage and cannot be forwarded"
                )
        # After the request's own parameters, as Triton adds them: a header wins a clash.
        return msgspec.structs.replace(
            options, parameters={**options.parameters, **model_parameters(found)}
        )


def _reserved(name: str) -> bool:
    """Whether a header's name is a request parameter key Triton keeps for itself (header
    names compare case-insensitively)."""
    key = name.lower()
    return key in RESERVED_PARAMETERS or key.startswith("triton_")
