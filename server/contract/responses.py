"""What the core answers a front end: a response's outputs, each with the config's declaration
and its shape, and the response parameters its model set."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy.typing as npt

from server.contract.load import LoadReport
from server.contract.model_io import TensorSpec


class InferOutput(msgspec.Struct, frozen=True):
    """One output to send back, with the config's declaration of it."""

    spec: TensorSpec
    shape: tuple[int, ...]
    # Host memory when it reaches a front end; None: the core wrote it to its shared memory region.
    array: npt.NDArray[Any] | None


class InferResponse(msgspec.Struct, frozen=True):
    """What a front end encodes for the client."""

    model: str
    version: int
    outputs: list[InferOutput]
    # The response parameters (a python model's `InferenceResponse(parameters=...)`): bool, int
    # or str values; None when it set none.
    parameters: Mapping[str, bool | int | float | str] | None = None
    load: LoadReport | None = None  # the model's load, when the request asked for it
