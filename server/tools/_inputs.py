"""Requests the tools send a model: seeded data of each input's type and dims, as a client of
the model's config would send it (batch dimension first when the model batches)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG

VARIABLE_DIM = 1  # the size a -1 dimension gets when the user names no shape


def sample_inputs(
    config: mc.ModelConfig,
    batch_size: int,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> dict[str, npt.NDArray[np.generic]]:
    """One request of `batch_size` (ignored when the model does not batch) for every input of
    a completed config; `shapes` gives an input's dims (without the batch dimension) in place
    of its config dims, for inputs with variable dimensions."""
    rng = np.random.default_rng(0)
    batch = (max(batch_size, 1),) if config.max_batch_size > 0 else ()
    arrays: dict[str, npt.NDArray[np.generic]] = {}
    for tensor in config.input:
        dims = (shapes or {}).get(tensor.name)
        if dims is None:
            dims = tuple(VARIABLE_DIM if dim < 0 else dim for dim in tensor.dims)
        arrays[tensor.name] = sample_array(BY_CONFIG[tensor.data_type].numpy, (*batch, *dims), rng)
    return arrays


def sample_array(
    dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator
) -> npt.NDArray[np.generic]:
    """Seeded data of one tensor: floats in [0, 1), integers 0 or 1, BYTES b"0"."""
    if dtype == np.dtype(object):
        return np.full(shape, b"0", dtype=object)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    return rng.integers(0, 2, size=shape).astype(dtype)
