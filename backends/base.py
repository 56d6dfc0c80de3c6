"""The contract between the server and a backend: signatures, instances and their results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from backends.device import Device
from backends.errors import BackendError

# Tensor name -> array. BYTES tensors are object arrays of `bytes`; BF16 travels as uint16 bits.
TensorMap = Mapping[str, npt.NDArray[Any]]


@dataclass(frozen=True, slots=True)
class TensorSignature:
    """One input or output as the model file declares it."""

    name: str
    data_type: int  # a `model_config_pb2.DataType` value, e.g. TYPE_FP32
    shape: tuple[int, ...]  # full shape as in the file; -1 marks a dynamic dimension


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """The inputs and outputs a model file declares, in file order."""

    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]


# A request's parameters for the model (the scheduler's own already taken out).
Parameters = Mapping[str, bool | int | float | str]


class Outputs(dict[str, np.ndarray]):
    """One response's outputs with the response parameters its model set (a python model's
    `InferenceResponse(parameters=...)`); a plain dict is a response without any. The batcher
    hands a response on as it is, so the parameters reach the front end with the outputs."""

    __slots__ = ("parameters",)

    def __init__(self, arrays: Mapping[str, np.ndarray], parameters: Parameters) -> None:
        super().__init__(arrays)
        self.parameters = parameters


def response_parameters(outputs: Mapping[str, Any]) -> Parameters | None:
    """The response parameters of a response's outputs; None when it has none."""
    return outputs.parameters if isinstance(outputs, Outputs) and outputs.parameters else None


# One request's answer: every output it produced (batch axis first), or why it alone failed.
Response = dict[str, np.ndarray] | BackendError


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """The responses of one execution, one per request in order, and where its time went."""

    responses: list[Response]
    compute_input_ns: int  # binding and copying inputs into the runtime
    compute_infer_ns: int  # the runtime's own execution
    compute_output_ns: int  # copying outputs out of the runtime
    # The requests (their indexes) the model asked to run again in a later batch (a python
    # model of an iterative sequence, with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE); their
    # entries in `responses` are empty and answer nothing.
    rescheduled: frozenset[int] = frozenset()


class Instance(Protocol):
    """One loaded copy of a model version, with its own worker thread."""

    @property
    def name(self) -> str: ...

    @property
    def signature(self) -> ModelSignature:
        """The inputs and outputs the model file declares."""
        ...

    @property
    def device(self) -> Device:
        """Where it computes: the CPU, or the CUDA device its session runs on."""
        ...

    @property
    def healthy(self) -> bool:
        """Whether it can run a batch now: False while a python model's worker process is
        being replaced; its model is not ready meanwhile."""
        ...

    @property
    def restarts(self) -> int:
        """How many times its worker was replaced (a python model's process, or its worker in
        this process), each time losing the state its model kept there; 0 for the others."""
        ...

    async def ready(self) -> bool:
        """Whether its model may answer ready: `healthy`, and for a python model that defines
        `is_ready()`, that method's answer (bounded in time); never raises."""
        ...

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        """Run one batch on this instance's worker; never blocks the event loop.

        `requests` are the batch's requests in order, each with its own leading batch dimension
        when the model batches; the instance assembles them (where depends on the device).
        Raising fails the whole batch; an error in `responses` fails only its request.
        `parameters` are the requests' own, in order (empty: none had any); backends that take
        no parameters ignore them. Requests' tensors may be device arrays (CUDA shared memory,
        an ensemble's intermediates); an instance on the CPU reads them on the host. With
        `device_outputs` (the consumer reads on a device) an instance on a CUDA device answers
        with device arrays; otherwise outputs are host arrays.
        """
        ...

    def close(self) -> None:
        """Release the session and the worker thread; the instance is unusable afterwards."""
        ...
