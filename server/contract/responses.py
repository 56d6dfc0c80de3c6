"""What the core answers a front end: a response's outputs, each with the config's declaration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from server.contract.model_io import TensorSpec


@dataclass(frozen=True, slots=True)
class InferOutput:
    """One output to send back, with the config's declaration of it."""

    spec: TensorSpec
    array: npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class InferResponse:
    """What a front end encodes for the client."""

    model: str
    version: int
    outputs: list[InferOutput]
