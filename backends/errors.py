"""Errors raised by backends: loading a model file and executing a batch."""


class BackendError(Exception):
    """Base of every backend error."""


class ModelLoadError(BackendError):
    """A model file could not be opened, or does not match what its config declares."""


class ExecutionError(BackendError):
    """A batch failed inside the runtime; only that batch's requests fail."""


# Triton's error codes (TRITONSERVER_Error_Code), in their numeric order.
MODEL_ERROR_CODES = (
    "UNKNOWN",
    "INTERNAL",
    "NOT_FOUND",
    "INVALID_ARG",
    "UNAVAILABLE",
    "UNSUPPORTED",
    "ALREADY_EXISTS",
    "CANCELLED",
)


class ModelError(ExecutionError):
    """A request's error as its model answered it (a Python model's `TritonError`), with the
    model's code for it: one of `MODEL_ERROR_CODES`, which the client's status follows."""

    def __init__(self, message: str, code: str = "INTERNAL") -> None:
        super().__init__(message)
        self.code = code if code in MODEL_ERROR_CODES else "INTERNAL"


class InvalidTensorError(BackendError):
    """A request's tensor holds values this backend cannot take (e.g. non-UTF-8 strings)."""
