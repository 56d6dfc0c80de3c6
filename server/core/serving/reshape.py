"""Config `reshape`: the shape a tensor has in the model file when it differs from the `dims`
clients see (Triton's ModelTensorReshape). Inputs are reshaped before they are batched, outputs
after they are split, so batching and clients only ever see the config's dims."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError, InvalidInputError


@dataclass(frozen=True, slots=True)
class Reshape:
    """Which tensors change shape between the client's view and the model file's."""

    model: str
    inputs: Mapping[str, tuple[int, ...]]  # input -> its shape in the model file, no batch axis
    outputs: Mapping[str, tuple[int, ...]]  # output -> its config dims, no batch axis
    batching: bool  # max_batch_size > 0: the first axis is the batch and is kept

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> Reshape | None:
        inputs = {t.name: tuple(t.reshape.shape) for t in config.input if t.HasField("reshape")}
        outputs = {t.name: tuple(t.dims) for t in config.output if t.HasField("reshape")}
        if not inputs and not outputs:
            return None
        return cls(config.name, inputs, outputs, config.max_batch_size > 0)

    def to_model(self, arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """A request's inputs as the model file takes them."""
        return self._apply(arrays, self.inputs, _input_error)

    def to_config(self, outputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """A request's outputs in the config's dims."""
        return self._apply(outputs, self.outputs, _output_error)

    def _apply(
        self,
        arrays: Mapping[str, npt.NDArray[Any]],
        shapes: Mapping[str, tuple[int, ...]],
        error: Callable[[str, str, list[int], list[int]], Exception],
    ) -> dict[str, npt.NDArray[Any]]:
        shaped = dict(arrays)
        for name, shape in shapes.items():
            if name in shaped:
                try:
                    shaped[name] = self._shaped(shaped[name], shape)
                except ValueError:
                    raise error(self.model, name, list(shaped[name].shape), list(shape)) from None
        return shaped

    def _shaped(self, array: npt.NDArray[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        full = (array.shape[0], *shape) if self.batching else shape
        return array.reshape(full)


def _input_error(model: str, name: str, have: list[int], shape: list[int]) -> Exception:
    return InvalidInputError(
        f"input '{name}' of shape {have} cannot take the shape {shape} model '{model}' "
        "reshapes it to"
    )


def _output_error(model: str, name: str, have: list[int], dims: list[int]) -> Exception:
    return ConfigError(
        f"model '{model}' produced output '{name}' of shape {have}, which does not fit its "
        f"dims {dims}"
    )
