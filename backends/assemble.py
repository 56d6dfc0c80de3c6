"""Batch assembly: concatenate requests' inputs, split outputs back, through an array namespace.

Assembly belongs to the instance that runs the batch: on a GPU it happens on that instance's
stream (CuPy) or into its pinned staging buffer; on CPU through NumPy on its worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from backends.base import TensorMap


class ArrayNamespace(Protocol):
    """The array functions assembly needs (NumPy and CuPy both provide them)."""

    def concatenate(self, arrays: Sequence[Any], axis: int = 0) -> Any: ...


def concat_inputs(
    requests: Sequence[TensorMap], xp: ArrayNamespace = np
) -> dict[str, npt.NDArray[Any]]:
    """One tensor per input name, requests stacked along the batch axis in order."""
    if len(requests) == 1:
        return dict(requests[0])
    names = requests[0].keys()
    return {name: xp.concatenate([r[name] for r in requests], axis=0) for name in names}


def request_rows(requests: Sequence[TensorMap]) -> list[int]:
    """Each request's rows along the batch axis (its first input's first dimension; 1 for a
    request without inputs or of scalars)."""
    rows = []
    for request in requests:
        first = next(iter(request.values()), None)
        rows.append(len(first) if first is not None and first.ndim else 1)
    return rows


def split_outputs(
    outputs: Mapping[str, npt.NDArray[Any]], batch_sizes: Sequence[int]
) -> list[dict[str, npt.NDArray[Any]]]:
    """Each request's slice of every output (views, no copies)."""
    if len(batch_sizes) == 1:
        return [dict(outputs)]
    parts: list[dict[str, npt.NDArray[Any]]] = [{} for _ in batch_sizes]
    for name, array in outputs.items():
        start = 0
        for part, size in zip(parts, batch_sizes, strict=True):
            part[name] = array[start : start + size]
            start += size
    return parts
