"""Model warmup: the config's `model_warmup` requests, run on every instance before READY."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends import BackendError, TensorMap
from batching import Executor
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG, decode_raw
from server.contract.errors import ConfigError, ServerError

_log = logging.getLogger(__name__)

Prepare = Callable[[TensorMap], dict[str, Any]]  # a backend's per-request input conversion

WARMUP_DIR = "warmup"  # input_data_file paths are relative to <model>/warmup, as Triton's


async def warm_up(
    config: mc.ModelConfig,
    path: Path,
    version: int,
    instances: Sequence[Executor],
    prepare: Prepare | None,
) -> None:
    """Run the config's warmup requests on every instance (through what the batcher runs it
    with); a failure fails the load."""
    for warmup in config.model_warmup:
        try:
            inputs = _warmup_inputs(config, warmup, path)
            if prepare is not None:
                inputs = prepare(inputs)
            for _ in range(max(warmup.count, 1)):
                for instance in instances:
                    await _check_warmup(instance, inputs)
        except (ServerError, BackendError, OSError, ValueError) as exc:
            raise ConfigError(
                f"model '{config.name}' version {version}: warmup '{warmup.name}' failed: {exc}"
            ) from exc
        _log.info("model '%s' version %d: warmup '%s' done", config.name, version, warmup.name)


async def _check_warmup(instance: Executor, inputs: dict[str, Any]) -> None:
    result = await instance.execute([inputs])
    for response in result.responses:
        if isinstance(response, BackendError):
            raise response


def _warmup_inputs(
    config: mc.ModelConfig, warmup: mc.ModelWarmup, path: Path
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    batch = (max(warmup.batch_size, 1),) if config.max_batch_size > 0 else ()
    arrays = {}
    for name, spec in warmup.inputs.items():
        datatype = BY_CONFIG.get(spec.data_type)
        if datatype is None:
            raise ConfigError(f"input '{name}' has no valid data_type")
        shape = (*batch, *spec.dims)
        choice = spec.WhichOneof("input_data_type")
        if choice == "input_data_file":
            file = (path / WARMUP_DIR / spec.input_data_file).resolve()
            if (path / WARMUP_DIR).resolve() not in file.parents:
                raise ConfigError(f"input '{name}': '{spec.input_data_file}' is outside warmup/")
            single = decode_raw(name, datatype, tuple(spec.dims), file.read_bytes())
            arrays[name] = np.broadcast_to(single, shape).copy()
        elif datatype.wire == "BYTES":
            fill = b"" if choice == "zero_data" else b"warmup"
            arrays[name] = np.full(shape, fill, dtype=object)
        elif choice == "random_data":
            arrays[name] = rng.integers(0, 2, size=shape).astype(datatype.numpy)
        else:
            arrays[name] = np.zeros(shape, dtype=datatype.numpy)
    return arrays
