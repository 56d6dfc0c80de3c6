"""The exception these utilities raise (and a model may), and the error one response carries."""

from __future__ import annotations


class TritonModelException(Exception):
    """Raised by these utilities when a model uses them wrongly; a model may raise it too."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class TritonError:
    """The error of one response (not an exception: it travels inside an InferenceResponse)."""

    # TRITONSERVER_Error_Code values.
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"
