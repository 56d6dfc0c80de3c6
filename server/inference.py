"""Checking a decoded request against the model it targets, before it is queued."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from batching import Parameters
from proto import model_config_pb2 as mc
from server.datatypes import BY_CONFIG, DataType
from server.errors import InvalidInputError

ParameterValue = bool | int | float | str  # one request parameter's value


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output as the config declares it, without the batch dimension."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]  # -1 accepts any size
    optional: bool


@dataclass(frozen=True, slots=True)
class ModelIO:
    """The config's tensors in the form the hot path reads (no protobuf per request)."""

    model: str
    max_batch_size: int  # 0: the model does not batch and shapes are full
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]  # in config order

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> ModelIO:
        return cls(
            model=config.name,
            max_batch_size=config.max_batch_size,
            inputs={t.name: _spec(t, t.optional) for t in config.input},
            outputs={t.name: _spec(t, False) for t in config.output},
        )


def _spec(tensor: mc.ModelInput | mc.ModelOutput, optional: bool) -> TensorSpec:
    return TensorSpec(tensor.name, BY_CONFIG[tensor.data_type], tuple(tensor.dims), optional)


@dataclass(frozen=True, slots=True)
class InferOptions:
    """A request's parameters: the two the scheduler reads (Triton's reserved `priority` and
    `timeout`) and the others, which go to the model (a Python model's `request.parameters()`);
    for a request built in the server, whether its outputs may stay in device memory."""

    priority: int = 0  # 0: the model's default priority level; 1 is the highest
    timeout_us: int = 0  # queue timeout; may only shorten the model's, and only if allowed
    parameters: Parameters = field(default_factory=dict)
    device_outputs: bool = False  # an ensemble step whose consumers all compute on a device


# Request parameters Triton keeps for itself (besides every `triton_...` one): never the model's.
RESERVED_PARAMETERS = frozenset(
    {
        "priority",
        "timeout",
        "binary_data_output",
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "headers",
    }
)


def model_parameters(items: Iterable[tuple[str, object]]) -> dict[str, ParameterValue]:
    """The request parameters that reach the model: all but the reserved ones, each a boolean,
    number or string."""
    chosen: dict[str, ParameterValue] = {}
    for key, value in items:
        if key in RESERVED_PARAMETERS or key.startswith("triton_"):
            continue
        if not isinstance(value, bool | int | float | str):
            raise InvalidInputError(
                f"request parameter '{key}' must be a boolean, number or string, got "
                f"{type(value).__name__}"
            )
        chosen[key] = value
    return chosen


@dataclass(frozen=True, slots=True)
class InferRequest:
    """One request as a front end decoded it, whatever the wire protocol."""

    model: str
    version: str  # "" serves the newest ready version
    inputs: Sequence[InferInput]
    outputs: Sequence[str]  # the outputs asked for; empty: all of them
    options: InferOptions
    request_id: str = ""
    carrier: Mapping[str, str] | None = None  # trace headers, when tracing is on


@dataclass(frozen=True, slots=True)
class InferInput:
    """One input tensor as the client sent it, already decoded from the wire."""

    name: str
    datatype: str  # wire name, e.g. "FP32"
    shape: tuple[int, ...]
    array: npt.NDArray[Any]


def check_request(
    io: ModelIO, inputs: Sequence[InferInput], outputs: Sequence[str]
) -> tuple[dict[str, npt.NDArray[Any]], int]:
    """The request's arrays by name and its batch size (0 when the model does not batch)."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    batch_size = 0
    for tensor in inputs:
        spec = io.inputs.get(tensor.name)
        if spec is None:
            raise InvalidInputError(
                f"unexpected inference input '{tensor.name}' for model '{io.model}'"
            )
        if tensor.name in arrays:
            raise InvalidInputError(
                f"input '{tensor.name}' appears more than once in the request for model "
                f"'{io.model}'"
            )
        if tensor.datatype != spec.datatype.wire:
            raise InvalidInputError(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model "
                f"'{io.model}' expects '{spec.datatype.wire}'"
            )
        batch_size = _check_shape(io, spec, tensor.shape, batch_size)
        arrays[tensor.name] = tensor.array
    missing = [name for name, spec in io.inputs.items() if name not in arrays and not spec.optional]
    if missing:
        raise InvalidInputError(
            f"expected {len(io.inputs)} inputs but got {len(arrays)} inputs for model "
            f"'{io.model}'. Got input(s) {sorted(arrays)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    for name in outputs:
        if name not in io.outputs:
            raise InvalidInputError(f"unexpected inference output '{name}' for model '{io.model}'")
    return arrays, batch_size


def _check_shape(io: ModelIO, spec: TensorSpec, shape: tuple[int, ...], batch_size: int) -> int:
    dims = shape
    if io.max_batch_size > 0:
        if not shape:
            raise InvalidInputError(
                f"input '{spec.name}' for model '{io.model}' has no batch dimension; expected "
                f"shape {_shown(spec, io)}"
            )
        batch, dims = shape[0], shape[1:]
        if batch < 1 or batch > io.max_batch_size:
            raise InvalidInputError(
                f"inference request batch-size must be <= {io.max_batch_size} for "
                f"'{io.model}', got {batch} for input '{spec.name}'"
                if batch > io.max_batch_size
                else f"inference request batch-size must be >= 1 for '{io.model}', got {batch}"
            )
        if batch_size and batch != batch_size:
            raise InvalidInputError(
                f"input '{spec.name}' has batch size {batch}, but other inputs of the request "
                f"for model '{io.model}' have batch size {batch_size}"
            )
        batch_size = batch
    matches = len(dims) == len(spec.dims) and all(
        want == -1 or want == have for want, have in zip(spec.dims, dims, strict=True)
    )
    if not matches:
        raise InvalidInputError(
            f"unexpected shape for input '{spec.name}' for model '{io.model}'. "
            f"Expected {_shown(spec, io)}, got {list(shape)}"
        )
    return batch_size


def _shown(spec: TensorSpec, io: ModelIO) -> list[int]:
    return [-1, *spec.dims] if io.max_batch_size > 0 else list(spec.dims)
