"""Ragged batching, as Triton's ONNX Runtime, PyTorch and OpenVINO backends do it: requests whose
ragged inputs (`allow_ragged_batch`) differ in shape share a batch, each such input reaches the
model as one dimension holding the batch's elements end to end, and the model reads where each
request's elements lie from the batch inputs the server adds (`batch_input`). An output the
config scatters (`batch_output` BATCH_SCATTER_WITH_INPUT_SHAPE) goes back to each request in the
shape of its source input; every other output is split by the requests' rows, as always.

Triton describes each batch input per request (the first request's part of
BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO holds a leading 0; BATCH_MAX_ELEMENT_COUNT_AS_SHAPE is
the first request's part alone); the model sees the requests' parts end to end, and so it does
here. A Python model receives each
request apart, so it takes ragged inputs as they come and no batch inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from backends import (
    ExecutionError,
    ExecutionResult,
    Instance,
    Parameters,
    Response,
    TensorMap,
    on_host,
)
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG
from server.contract.errors import ConfigError

_Kind = mc.BatchInput.Kind
_BATCH_INPUT_TYPES = (mc.TYPE_INT32, mc.TYPE_FP32)


@dataclass(frozen=True, slots=True)
class BatchInput:
    """One tensor the server adds to every batch, derived from a request input."""

    kind: int  # a BatchInput.Kind
    target: str  # the model file's input it fills
    dtype: np.dtype[Any]  # int32 or float32
    source: str  # the request input it describes


@dataclass(frozen=True, slots=True)
class RaggedPlan:
    """What a model's config asks of ragged batching, checked at load."""

    model: str
    ragged: frozenset[str]  # inputs joined as one dimension (allow_ragged_batch)
    batch_inputs: tuple[BatchInput, ...]
    scatter: Mapping[str, str]  # output -> the input whose shapes it goes back in

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> RaggedPlan | None:
        """The plan of a model served by a backend that joins a batch's inputs (None when its
        config asks for none of it); ConfigError for what cannot work."""
        ragged = frozenset(tensor.name for tensor in config.input if tensor.allow_ragged_batch)
        if not (config.batch_input or config.batch_output or (ragged and config.max_batch_size)):
            return None  # (without batching, a ragged input is any other)
        name = config.name
        inputs = {tensor.name for tensor in config.input}
        outputs = {tensor.name for tensor in config.output}
        if (config.batch_input or config.batch_output) and config.max_batch_size <= 0:
            raise ConfigError(
                f"model '{name}': batch_input and batch_output need batching (max_batch_size > 0)"
            )
        batch_inputs = []
        for entry in config.batch_input:
            kind = _Kind.Name(entry.kind)
            if len(entry.target_name) != 1 or len(entry.source_input) != 1:
                raise ConfigError(
                    f"model '{name}': batch input {kind} must name one target_name and one "
                    f"source_input, got {list(entry.target_name)} and {list(entry.source_input)}"
                )
            target, source = entry.target_name[0], entry.source_input[0]
            if source not in inputs:
                raise ConfigError(
                    f"model '{name}': batch input '{target}' ({kind}) reads source_input "
                    f"'{source}', which is not an input of the config"
                )
            if target in inputs:
                raise ConfigError(
                    f"model '{name}': batch input '{target}' is also an input of the config; the "
                    "server fills it, so no request may send it"
                )
            if entry.data_type not in _BATCH_INPUT_TYPES:
                raise ConfigError(
                    f"model '{name}': batch input '{target}' must be TYPE_INT32 or TYPE_FP32, "
                    f"not {mc.DataType.Name(entry.data_type)}"
                )
            dtype = BY_CONFIG[entry.data_type].numpy
            batch_inputs.append(BatchInput(entry.kind, target, dtype, source))
        scatter: dict[str, str] = {}
        for scattered in config.batch_output:
            if len(scattered.source_input) != 1:
                raise ConfigError(
                    f"model '{name}': batch output {list(scattered.target_name)} must name one "
                    f"source_input, got {list(scattered.source_input)}"
                )
            source = scattered.source_input[0]
            for target in scattered.target_name:
                if target not in outputs or source not in inputs:
                    raise ConfigError(
                        f"model '{name}': batch output '{target}' scatters with the shape of "
                        f"'{source}': both must be in the config (an output and an input)"
                    )
                scatter[target] = source
        return cls(name, ragged, tuple(batch_inputs), scatter)

    @property
    def targets(self) -> frozenset[str]:
        """The model file's inputs the server fills (the batch inputs)."""
        return frozenset(batch_input.target for batch_input in self.batch_inputs)

    def assemble(self, requests: Sequence[TensorMap]) -> dict[str, npt.NDArray[Any]]:
        """The batch as the model takes it: ragged inputs flattened end to end, the others
        joined along the batch axis, and the batch inputs."""
        batch: dict[str, npt.NDArray[Any]] = {}
        for name in requests[0]:
            parts = [request[name] for request in requests]
            if name in self.ragged:
                batch[name] = np.concatenate([np.ravel(part) for part in parts])
            else:
                batch[name] = np.concatenate(parts) if len(parts) > 1 else parts[0]
        for batch_input in self.batch_inputs:
            sources = [request[batch_input.source] for request in requests]
            batch[batch_input.target] = _batch_input(batch_input, sources)
        return batch

    def split(
        self, outputs: Mapping[str, npt.NDArray[Any]], requests: Sequence[TensorMap]
    ) -> list[Response]:
        """Each request's part of the batch's outputs: a scattered output in the shape of the
        request's source input (and the output's own trailing dimensions), any other by the
        requests' rows. An output that does not hold the batch fails the batch, saying why."""
        parts: list[dict[str, npt.NDArray[Any]]] = [{} for _ in requests]
        rows = [len(next(iter(request.values()))) for request in requests]
        for name, array in outputs.items():
            source = self.scatter.get(name)
            shapes: list[tuple[int, ...] | None] = [None] * len(requests)
            sizes = rows
            if source is not None:
                sizes = [request[source].size for request in requests]
                shapes = [request[source].shape for request in requests]
            if array.ndim == 0 or len(array) != sum(sizes):
                what = f"the {sum(sizes)} elements of '{source}'" if source else "its rows"
                return [_mismatch(self.model, name, array, what)] * len(requests)
            start = 0
            for part, size, shape in zip(parts, sizes, shapes, strict=True):
                piece = array[start : start + size]
                part[name] = piece if shape is None else piece.reshape(*shape, *array.shape[1:])
                start += size
        return list(parts)


class RaggedExecutor:
    """The batcher's executor for one instance of a ragged model: assembles each batch as the
    plan says and hands the instance one request holding it."""

    def __init__(self, instance: Instance, plan: RaggedPlan) -> None:
        self.instance = instance
        self._plan = plan

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def restarts(self) -> int:
        return self.instance.restarts

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        """Run the batch; device arrays (CUDA shared memory) are read to the host first, and
        the outputs are host arrays whatever `device_outputs` says."""
        host = [{name: on_host(array) for name, array in request.items()} for request in requests]
        result = await self.instance.execute([self._plan.assemble(host)])
        (outcome,) = result.responses
        responses: list[Response] = (
            [outcome] * len(requests)
            if isinstance(outcome, Exception)
            else self._plan.split(outcome, host)
        )
        return ExecutionResult(
            responses, result.compute_input_ns, result.compute_infer_ns, result.compute_output_ns
        )


def _batch_input(batch_input: BatchInput, sources: Sequence[npt.NDArray[Any]]) -> np.ndarray:
    counts = np.array([source.size for source in sources], np.int64)
    kind = batch_input.kind
    if kind == _Kind.BATCH_ELEMENT_COUNT:
        values = counts
    elif kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        values = np.cumsum(counts)
    elif kind == _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        values = np.concatenate([[0], np.cumsum(counts)])
    elif kind == _Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        values = np.zeros(int(counts.max()), np.int64)  # only its shape means anything
    else:  # BATCH_ITEM_SHAPE(_FLATTEN): each row's shape after the batch dimension
        items = np.array([row for source in sources for row in [source.shape[1:]] * len(source)])
        values = items.reshape(-1) if kind == _Kind.BATCH_ITEM_SHAPE_FLATTEN else items
    return values.astype(batch_input.dtype)


def _mismatch(model: str, name: str, array: npt.NDArray[Any], what: str) -> ExecutionError:
    return ExecutionError(
        f"model '{model}': output '{name}' has shape {list(array.shape)}, which does not hold "
        f"{what} along its first dimension"
    )
