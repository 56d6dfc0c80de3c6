"""Data exchanged with the batcher: what executors return and what each request gets back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import msgspec
import numpy.typing as npt

TensorMap = Mapping[str, npt.NDArray[Any]]
# A request's parameters that reach the model (Triton's reserved ones already taken out).
Parameters = Mapping[str, bool | int | float | str]
NO_PARAMETERS: Parameters = MappingProxyType({})


class Outcome(Protocol):
    """What one execution produced (a backend's result satisfies this structurally)."""

    @property
    def responses(self) -> Sequence[Mapping[str, npt.NDArray[Any]] | Exception]:
        """One per request, in the batch's order: its outputs, or the error that fails it."""
        ...

    @property
    def compute_input_ns(self) -> int: ...
    @property
    def compute_infer_ns(self) -> int: ...
    @property
    def compute_output_ns(self) -> int: ...
    @property
    def rescheduled(self) -> frozenset[int]:
        """The requests (indexes) to run again in a later batch: an iterative sequence's model
        asked for it (empty for every other model; their `responses` entries answer nothing)."""
        ...


class Executor(Protocol):
    """Runs one batch; one executor per model instance, never two batches at once."""

    @property
    def name(self) -> str: ...

    @property
    def restarts(self) -> int:
        """How many times the instance's worker was replaced, each time losing what its model
        kept in it (a python model's own sequence state); 0 for an instance without one."""
        ...

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> Outcome:
        """Run the batch's requests (in order); assembling them is the executor's business.
        `parameters` are the requests' own, in the same order (empty: none had any).
        `device_outputs`: every request's consumer reads on a device, so an executor that
        computes on one may answer with device arrays (the others ignore it)."""
        ...


# The sequence batcher hands each request's correlation id, and its START and END flags where
# set (True), to its executor among the request's parameters under Triton's reserved names,
# which no client parameter reaches a model with.
CORRELATION_ID = "sequence_id"
SEQUENCE_START = "sequence_start"
SEQUENCE_END = "sequence_end"


@dataclass(frozen=True, slots=True)
class SequenceStep:
    """A request's place in its sequence, for a sequence batcher (the others ignore it)."""

    correlation_id: int | str  # 0 or "": the request names no sequence
    start: bool = False
    end: bool = False


class RequestResult(msgspec.Struct, frozen=True):
    """One request's outputs and the time it spent in each stage."""

    outputs: Mapping[str, npt.NDArray[Any]]
    queue_ns: int  # from enqueue until its batch started executing
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    batch_size: int  # size of the whole batch this request ran in
    instance: str  # name of the executor that ran it


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """One execution, reported once per batch to the batcher's observer."""

    batch_size: int  # sum of the requests' batch sizes (1 for a non-batching model)
    request_count: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    succeeded: bool
