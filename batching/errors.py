"""Errors raised by the batching layer."""


class BatchingError(Exception):
    """Base of every batching error."""


class BatcherClosedError(BatchingError):
    """The batcher is stopping or stopped and takes no new requests."""
