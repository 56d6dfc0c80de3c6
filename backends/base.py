"""The contract between the server and a backend: signatures, instances and their results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

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


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    """Outputs of one execution and where its time went."""

    outputs: dict[str, np.ndarray]  # every output the model produces, batch axis first
    compute_input_ns: int  # binding and copying inputs into the runtime
    compute_infer_ns: int  # the runtime's own execution
    compute_output_ns: int  # copying outputs out of the runtime


class Instance(Protocol):
    """One loaded copy of a model version, with its own worker thread."""

    @property
    def name(self) -> str: ...

    @property
    def signature(self) -> ModelSignature:
        """The inputs and outputs the model file declares."""
        ...

    async def execute(self, inputs: TensorMap) -> ExecutionResult:
        """Run one batch on this instance's worker; never blocks the event loop."""
        ...

    def close(self) -> None:
        """Release the session and the worker thread; the instance is unusable afterwards."""
        ...
