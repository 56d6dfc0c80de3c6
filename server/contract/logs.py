"""`LogControl`: the process's logging as Triton's LogSettings describe it, changeable at run time.

Log lines are one event each: time, level, source and message (`log_format` ISO8601 changes only
the timestamp), with the model and request id in the message where an event concerns one.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from server.contract.errors import InternalError, InvalidInputError

_FORMATS = {
    "default": "%(asctime)s %(levelname).1s %(name)s] %(message)s",
    "ISO8601": "%(asctime)s %(levelname)s %(name)s] %(message)s",
}
_DATE_FORMATS = {"default": None, "ISO8601": "%Y-%m-%dT%H:%M:%S%z"}


@dataclass(slots=True)
class LogState:
    """Triton's log settings."""

    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    log_file: str = ""  # "" logs to stderr; else lines are appended to this file


class LogControl:
    """Owns the root logger's handler and level."""

    def __init__(self, state: LogState) -> None:
        self.state = state
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        self._handler: logging.Handler = _handler_for(state.log_file)
        root.addHandler(self._handler)
        self._apply()

    def update(self, changes: dict[str, bool | int | str]) -> None:
        """Apply LogSettings changes; an unknown key or a wrong type changes nothing."""
        state = LogState(**{k: getattr(self.state, k) for k in LogState.__slots__})
        for key, value in changes.items():
            if key not in LogState.__slots__:
                raise InvalidInputError(f"unknown log setting '{key}'")
            expected = type(getattr(state, key))
            if type(value) is not expected:
                raise InvalidInputError(
                    f"log setting '{key}' takes a {expected.__name__}, got {value!r}"
                )
            if key == "log_format" and value not in _FORMATS:
                raise InvalidInputError(f"log_format must be one of {sorted(_FORMATS)}")
            setattr(state, key, value)
        if state.log_file != self.state.log_file:
            self._switch(_handler_for(state.log_file))
        self.state = state
        self._apply()

    def settings(self) -> dict[str, bool | int | str]:
        return {k: getattr(self.state, k) for k in LogState.__slots__}

    def _switch(self, handler: logging.Handler) -> None:
        root = logging.getLogger()
        root.removeHandler(self._handler)
        self._handler.close()
        self._handler = handler
        root.addHandler(handler)

    def _apply(self) -> None:
        state = self.state
        self._handler.setFormatter(
            logging.Formatter(_FORMATS[state.log_format], _DATE_FORMATS[state.log_format])
        )
        if state.log_verbose_level > 0:
            level = logging.DEBUG
        elif state.log_info:
            level = logging.INFO
        elif state.log_warning:
            level = logging.WARNING
        elif state.log_error:
            level = logging.ERROR
        else:
            level = logging.CRITICAL + 1
        logging.getLogger().setLevel(level)


def _handler_for(log_file: str) -> logging.Handler:
    """Lines to stderr, or appended to `log_file` (each process of the server appends its own
    lines); a file that cannot be opened is an error, as Triton's."""
    if not log_file:
        return logging.StreamHandler(sys.stderr)
    try:
        return logging.FileHandler(log_file, mode="a", encoding="utf-8")
    except OSError as exc:
        raise InternalError(f"cannot open log file '{log_file}': {exc.strerror}") from None
