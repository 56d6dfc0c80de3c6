"""Batching: per-model queues and the coroutine that hands work to free instances.

Never imports grpc or backends: instances arrive as `Executor`s from the composition root.
"""

from batching.batcher import Batcher
from batching.errors import BatcherClosedError, BatchingError
from batching.messages import ExecutionRecord, Executor, Outcome, RequestResult, TensorMap

__all__ = [
    "Batcher",
    "BatcherClosedError",
    "BatchingError",
    "ExecutionRecord",
    "Executor",
    "Outcome",
    "RequestResult",
    "TensorMap",
]
