"""Triton's header forwarding (--grpc-header-forward-pattern, --http-header-forward-pattern): a
request's headers whose names match the pattern reach the model as string request parameters."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from server.contract.requests import InferOptions, model_parameters


class HeaderForwarding:
    """Adds the matching headers of a request to its parameters; without a pattern, nothing."""

    def __init__(self, pattern: str | None) -> None:
        # Triton matches anywhere in the name (RE2::PartialMatch), case as sent: gRPC metadata
        # keys arrive lower-cased, HTTP header names as the client wrote them.
        self._regex = re.compile(pattern) if pattern else None

    @property
    def active(self) -> bool:
        """Whether a pattern was given (without one, a request's headers are never read)."""
        return self._regex is not None

    def apply(self, options: InferOptions, headers: Iterable[tuple[str, object]]) -> InferOptions:
        if self._regex is None:
            return options
        regex = self._regex
        found = [(str(k), str(v)) for k, v in headers if isinstance(v, str) and regex.search(k)]
        if not found:
            return options
        # After the request's own parameters, as Triton adds them: a header wins a clash. The
        # names Triton reserves (priority, sequence_id, triton_...) are never the model's.
        return replace(options, parameters={**options.parameters, **model_parameters(found)})
