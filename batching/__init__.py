"""Batching: per-model queues, Triton's batch selection, assembly, and the batcher coroutine.

Never imports grpc or backends: instances arrive as `Executor`s from the composition root.
"""

from batching.batcher import Batcher
from batching.errors import (
    BatcherClosedError,
    BatcherFaultError,
    BatchingError,
    DeadlineCancelledError,
    DeadlineExceededError,
    ExecutorContractError,
    LatencyTargetError,
    PolicyError,
    QueueFullError,
    RefusedError,
    RequestTimeoutError,
    SequenceError,
    SequenceLostError,
)
from batching.fair import FairLine
from batching.inflight import InFlight
from batching.limiter import ExecutionGate, RateLimiter, ResourceWait
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
from batching.queue import Queued, RequestQueue, split_expired
from batching.rate_limit import ExplicitCount, Needs, parse_explicit
from batching.sequence import SequenceBatcher
from batching.sequence_policy import (
    Control,
    ControlKind,
    ImplicitState,
    Selection,
    SequencePolicy,
    Strategy,
    ready_batch,
)

__all__ = [
    "NO_PARAMETERS",
    "BatchPolicy",
    "Batcher",
    "BatcherClosedError",
    "BatcherFaultError",
    "BatchingError",
    "Candidate",
    "Control",
    "ControlKind",
    "DeadlineCancelledError",
    "DeadlineExceededError",
    "Decision",
    "ExecutionGate",
    "ExecutionRecord",
    "Executor",
    "ExecutorContractError",
    "ExplicitCount",
    "FairLine",
    "ImplicitState",
    "InFlight",
    "LatencyTargetError",
    "Needs",
    "Outcome",
    "Parameters",
    "PolicyError",
    "QueueFullError",
    "QueuePolicy",
    "Queued",
    "RateLimiter",
    "RefusedError",
    "RequestQueue",
    "RequestResult",
    "RequestTimeoutError",
    "ResourceWait",
    "Selection",
    "SequenceBatcher",
    "SequenceError",
    "SequenceLostError",
    "SequencePolicy",
    "SequenceStep",
    "Strategy",
    "TensorMap",
    "TimeoutAction",
    "next_batch",
    "parse_explicit",
    "ready_batch",
    "split_expired",
]
