"""PyTorch itself, imported only when a PyTorch model loads (it takes seconds and hundreds of MB),
its CUDA devices, the process-wide switches Triton's backend sets, and the data types it takes."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from backends.errors import ModelLoadError
from backends.pytorch._settings import TorchSettings
from proto import model_config_pb2 as mc

_log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'convoy[pytorch]'"

# Config data type -> torch dtype attribute. Like Triton's backend: no unsigned types past uint8
# (TorchScript kernels lack them), no strings (lists of str are not served).
TORCH_DTYPES: dict[int, str] = {
    mc.TYPE_BOOL: "bool",
    mc.TYPE_UINT8: "uint8",
    mc.TYPE_INT8: "int8",
    mc.TYPE_INT16: "int16",
    mc.TYPE_INT32: "int32",
    mc.TYPE_INT64: "int64",
    mc.TYPE_FP16: "float16",
    mc.TYPE_FP32: "float32",
    mc.TYPE_FP64: "float64",
    mc.TYPE_BF16: "bfloat16",
}


def import_torch() -> Any:
    """The torch module; a load error naming the extra where it is missing.

    OpenMP's idle threads keep libgomp's default (a bounded spin, then sleep), as under Triton's
    libtorch and in the ceiling Convoy is measured against; served, it beat the passive policy at
    every concurrency on 2 cores (README, Backends). Where spinning starves other work (a CPU
    quota smaller than the cores torch counts), `OMP_WAIT_POLICY=PASSIVE` in the server's
    environment puts them to sleep at once.
    """
    try:
        return importlib.import_module("torch")
    except ImportError as exc:
        raise ModelLoadError(
            f"the PyTorch backend needs torch, which cannot be imported ({exc}): {INSTALL_HINT}"
        ) from exc


def torch_cuda_device_count() -> int:
    """CUDA devices torch can use (0 with a CPU build or without a driver)."""
    torch = import_torch()
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # a broken driver counts as none
        return 0


def apply_process_settings(torch: Any, model: str, settings: TorchSettings) -> None:
    """The switches PyTorch keeps per process, set as Triton's backend sets them; a thread count
    already set to another value stays, and the log says so."""
    torch.backends.cudnn.enabled = settings.cudnn
    if settings.jit_executor is not None:
        torch._C._jit_set_profiling_executor(settings.jit_executor)
    if settings.jit_profiling is not None:
        torch._C._jit_set_profiling_mode(settings.jit_profiling)
    if settings.tensor_fuser is not None:
        torch._C._jit_set_texpr_fuser_enabled(settings.tensor_fuser)
    if settings.intra_op_threads > 0 and torch.get_num_threads() != settings.intra_op_threads:
        torch.set_num_threads(settings.intra_op_threads)
        _log.info(
            "model '%s': PyTorch intra-op threads set to %d for the whole process",
            model,
            settings.intra_op_threads,
        )
    wanted = settings.inter_op_threads
    if wanted > 0 and torch.get_num_interop_threads() != wanted:
        try:
            torch.set_num_interop_threads(wanted)
        except RuntimeError:  # PyTorch allows it once, before any inter-op work
            _log.warning(
                "model '%s': INTER_OP_THREAD_COUNT %d ignored: PyTorch's inter-op pool is "
                "process-wide and already runs %d threads",
                model,
                wanted,
                torch.get_num_interop_threads(),
            )


def torch_dtype(torch: Any, model: str, side: str, name: str, data_type: int) -> Any:
    """The torch dtype of a config tensor; Triton's load error for a type it does not take."""
    attribute = TORCH_DTYPES.get(data_type)
    if attribute is None:
        raise ModelLoadError(
            f"unsupported datatype {mc.DataType.Name(data_type)} for {side} '{name}' for model "
            f"'{model}'"
        )
    return getattr(torch, attribute)
