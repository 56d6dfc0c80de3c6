"""Errors raised by backends: loading a model file and executing a batch."""


class BackendError(Exception):
    """Base of every backend error."""


class ModelLoadError(BackendError):
    """A model file could not be opened, or does not match what its config declares."""


class ExecutionError(BackendError):
    """A batch failed inside the runtime; only that batch's requests fail."""


class InvalidTensorError(BackendError):
    """A request's tensor holds values this backend cannot take (e.g. non-UTF-8 strings)."""
