"""The classification extension: an output asked for as its top k classes is answered as BYTES
strings "<value>:<index>[:<label>]", highest value first, as Triton's front ends answer it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from backends import on_host
from server.contract.datatypes import BY_WIRE
from server.contract.errors import CLASSIFICATION_TYPE
from server.contract.model_io import ModelIO, TensorSpec
from server.contract.responses import InferOutput

BYTES = BY_WIRE["BYTES"]
# The types Triton ranks (TopkClassifications); BOOL, FP16, BF16 and BYTES have no class result.
RANKED = frozenset(
    ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64")
)


def check_classification(io: ModelIO, classification: Mapping[str, int]) -> None:
    """Refuse, before the model runs, a classification of an output whose type has no order."""
    for name in classification:
        spec = io.outputs.get(name)
        if spec is not None and spec.datatype.wire not in RANKED:
            raise CLASSIFICATION_TYPE(datatype=spec.datatype.wire)


def classify(
    array: npt.NDArray[Any], count: int, labels: Sequence[str], batched: bool
) -> npt.NDArray[Any]:
    """The top `count` classes of an output (fewer when it has fewer), as BYTES: one row of
    classes per batch entry ([batch, k]) when the model batches, else one row ([k]) over the
    whole output, flattened."""
    rows = array.reshape(array.shape[0] if batched and array.ndim else 1, -1)
    k = min(count, rows.shape[1])
    # Highest value first; equal values keep index order (a stable sort of the reversed row).
    last = rows.shape[1] - 1
    order = last - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :k]
    classes = np.empty(order.shape, dtype=object)
    floating = rows.dtype.kind == "f"
    for (row, column), found in np.ndenumerate(order):
        index = int(found)
        value = rows[row, index]
        # Triton's std::to_string: "%f" for floating point, plain decimal for integers.
        text = f"{float(value):f}:{index}" if floating else f"{int(value)}:{index}"
        label = labels[index] if index < len(labels) else ""
        classes[row, column] = (f"{text}:{label}" if label else text).encode("utf-8")
    return classes if batched and array.ndim else classes.reshape(k)


def classified(
    outputs: Sequence[InferOutput],
    counts: Mapping[str, int],
    labels: Mapping[str, Sequence[str]],
    batched: bool,
) -> list[InferOutput]:
    """A response's outputs with those asked for as classes (`counts`: name -> k) replaced by
    their top classes, labelled from the output's label file (`labels`: name -> one per class)."""
    answered = []
    for output in outputs:
        name = output.spec.name
        if name not in counts or output.array is None:
            answered.append(output)
            continue
        classes = classify(on_host(output.array), counts[name], labels.get(name, ()), batched)
        spec = TensorSpec(name, BYTES, classes.shape[-1:], False)
        answered.append(InferOutput(spec, classes.shape, classes))
    return answered
