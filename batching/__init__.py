"""Batching: per-model queues, Triton's batch selection, assembly, and the batcher coroutine.

Never imports grpc or backends: instances arrive as `Executor`s from the composition root.
"""

from batching.batcher import Batcher
from batching.errors import (
    BatcherClosedError,
    BatchingError,
    ExecutorContractError,
    PolicyError,
    QueueFullError,
    RequestTimeoutError,
)
from batching.inflight import InFlight
from batching.messages import (
    NO_PARAMETERS,
    ExecutionRecord,
    Executor,
    Outcome,
    Parameters,
    RequestResult,
    TensorMap,
)
from batching.policy import (
    BatchPolicy,
    Candidate,
    Decision,
    QueuePolicy,
    TimeoutAction,
    next_batch,
)
from batching.queue import Queued, RequestQueue

__all__ = [
    "NO_PARAMETERS",
    "BatchPolicy",
    "Batcher",
    "BatcherClosedError",
    "BatchingError",
    "Candidate",
    "Decision",
    "ExecutionRecord",
    "Executor",
    "ExecutorContractError",
    "InFlight",
    "Outcome",
    "Parameters",
    "PolicyError",
    "QueueFullError",
    "QueuePolicy",
    "Queued",
    "RequestQueue",
    "RequestResult",
    "RequestTimeoutError",
    "TensorMap",
    "TimeoutAction",
    "next_batch",
]
