"""Errors raised by the batching layer."""

import asyncio


class BatchingError(Exception):
    """Base of every batching error."""


class BatcherClosedError(BatchingError):
    """The batcher is stopping or stopped and takes no new requests."""


class PolicyError(BatchingError):
    """The dynamic batching settings of a config are inconsistent."""


class RefusedError(BatchingError):
    """A request refused on arrival that may come back: after `retry_after_ns`, where the
    batcher can tell (`batching.turns`)."""

    def __init__(self, message: str, retry_after_ns: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ns = retry_after_ns


class QueueFullError(RefusedError):
    """The request's priority level already holds max_queue_size requests."""


class RequestTimeoutError(BatchingError):
    """The request waited in the queue past its timeout (timeout action REJECT)."""


class DeadlineExceededError(BatchingError):
    """The request's deadline (its client's, or its `timeout` parameter) passed before it ran;
    it was never executed."""


class DeadlineCancelledError(asyncio.CancelledError):
    """The caller went away at its deadline while the request still waited in the queue: a
    cancellation (the caller's task ends cancelled), which also tells that the request expired
    there and was never executed. Raised when the caller's deadline cancels it before the
    batcher drops it (under load its loop may look after the deadline has passed)."""


class LatencyTargetError(RefusedError):
    """The model's latency target could not be kept for the request: refused on arrival.
    `retry_after_ns`: at least the time the work ahead of it takes to shrink by the excess, and
    later when other refused requests were told that turn first."""


class BatcherFaultError(BatchingError):
    """The batcher's own loop failed (a bug, logged): the request was never executed, and the
    loop started again (`batching.supervise`)."""


class ExecutorContractError(BatchingError):
    """An executor answered a batch with a different number of responses than requests."""


class SequenceError(BatchingError):
    """A request does not fit its sequence: no correlation id, no START, a batch of several."""


class SequenceLostError(BatchingError):
    """The request's sequence began on an instance whose worker was since replaced, taking the
    state its model kept for the sequence with it: the sequence must start again."""
