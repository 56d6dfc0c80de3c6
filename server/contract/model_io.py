"""A model's declared tensors in the form the hot path reads, and the check of a decoded request
against them (names, data types, shapes, batch size) before it is queued."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG, DataType
from server.contract.errors import InvalidInputError
from server.contract.requests import InferInput


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
    # Each input was checked known and unique: as many as the model has are all of them.
    missing = (
        [name for name, spec in io.inputs.items() if name not in arrays and not spec.optional]
        if len(arrays) < len(io.inputs)
        else ()
    )
    if missing:
        raise InvalidInputError(
            f"expected {len(io.inputs)} inputs but got {len(arrays)} inputs for model "
            f"'{io.model}'. Got input(s) {sorted(arrays)}, but missing required input(s) "
            f"{missing}. Please provide all required input(s)."
        )
    for name in outputs:
        if name not in io.outputs:
            raise InvalidInputError(f"unexpected inference output '{name}' for model '{io.model}'")
    if len(outputs) > 1 and len(set(outputs)) != len(outputs):  # each would be answered again
        repeated = sorted({name for name in outputs if outputs.count(name) > 1})
        raise InvalidInputError(
            f"outputs {repeated} are requested more than once for model '{io.model}'"
        )
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
    # Equal tuples first: one C comparison decides most requests without the generator.
    matches = dims == spec.dims or (
        len(dims) == len(spec.dims)
        and all(want == -1 or want == have for want, have in zip(spec.dims, dims, strict=True))
    )
    if not matches:
        raise InvalidInputError(
            f"unexpected shape for input '{spec.name}' for model '{io.model}'. "
            f"Expected {_shown(spec, io)}, got {list(shape)}"
        )
    return batch_size


def _shown(spec: TensorSpec, io: ModelIO) -> list[int]:
    return [-1, *spec.dims] if io.max_batch_size > 0 else list(spec.dims)
