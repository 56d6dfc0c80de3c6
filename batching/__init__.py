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
    SequenceError,
)
from batching.inflight import InFlight
from batching.messages import (
    NO_PARAMETERS,
    ExecutionRecord,
    Executor,
    Outcome,
    Parameters,
    RequestResult,
    SequenceStep,
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
from batching.sequence import (
    Control,
    ControlKind,
    ImplicitState,
    Selection,
    SequenceBatcher,
    SequencePolicy,
    Strategy,
    ready_batch,
)

__all__ = [
    "NO_PARAMETERS",
    "BatchPolicy",
    "Batcher",
    "BatcherClosedError",
    "BatchingError",
    "Candidate",
    "Control",
    "ControlKind",
    "Decision",
    "ExecutionRecord",
    "Executor",
    "ExecutorContractError",
    "ImplicitState",
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
    "Selection",
    "SequenceBatcher",
    "SequenceError",
    "SequencePolicy",
    "SequenceStep",
    "Strategy",
    "TensorMap",
    "TimeoutAction",
    "next_batch",
    "ready_batch",
]
