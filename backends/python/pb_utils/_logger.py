"""Triton's model `Logger`: lines through Python's logging, under the logger the worker
attaches its handler to."""

from __future__ import annotations

import enum
import logging

# The worker attaches its handler (model and instance in every line) to this logger.
LOGGER_NAME = "triton_python_backend_utils"


class LogLevel(enum.Enum):
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Triton's model logger; lines go to the worker's stderr with the model and instance."""

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        _emit(message, level)

    @staticmethod
    def log_info(message: str) -> None:
        _emit(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        _emit(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        _emit(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        _emit(message, LogLevel.VERBOSE)


def _emit(message: str, level: LogLevel) -> None:
    # stacklevel 3 names the line of model.py that called the Logger method.
    logging.getLogger(LOGGER_NAME).log(level.value, message, stacklevel=3)
