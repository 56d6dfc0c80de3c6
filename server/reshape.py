"""Config `reshape`: the shape a tensor has in the model file when it differs from the `dims`
clients see (Triton's ModelTensorReshape). Inputs are reshaped before they are batched, outputs
after they are split, so batching and clients only ever see the config's dims."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.errors import ConfigError, InvalidInputError


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
        shaped = dict(arrays)
        for name, shape in self.inputs.items():
            if name in shaped:
                try:
                    shaped[name] = self._shaped(shaped[name], shape)
                except ValueError:
                    raise InvalidInputError(
                        f"input '{name}' of shape {list(shaped[name].shape)} cannot take the "
                        f"shape {list(shape)} model '{self.model}' reshapes it to"
                    ) from None
        return shaped

    def to_config(self, outputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """A request's outputs in the config's dims."""
        shaped = dict(outputs)
        for name, dims in self.outputs.items():
            if name in shaped:
                try:
                    shaped[name] = self._shaped(shaped[name], dims)
                except ValueError:
                    raise ConfigError(
                        f"model '{self.model}' produced output '{name}' of shape "
                        f"{list(shaped[name].shape)}, which does not fit its dims {list(dims)}"
                    ) from None
        return shaped

    def _shaped(self, array: npt.NDArray[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        full = (array.shape[0], *shape) if self.batching else shape
        return array.reshape(full)
