"""`TorchSettings`: how a TorchScript model runs, under the parameter names of Triton's PyTorch
backend (`INFERENCE_MODE`, `DISABLE_OPTIMIZED_EXECUTION`, `DISABLE_CUDNN`, the JIT switches and
the thread counts)."""

from __future__ import annotations

from dataclasses import dataclass

from backends.config import bool_parameter, int_parameter, string_parameters
from proto import model_config_pb2 as mc


@dataclass(frozen=True, slots=True)
class TorchSettings:
    """Per-model switches; each instance applies them on its own worker thread (the graph
    executor's optimize flag and the inference mode are thread-local in PyTorch)."""

    inference_mode: bool = True  # `INFERENCE_MODE`: torch.inference_mode (Triton's default on)
    optimized_execution: bool = True  # not `DISABLE_OPTIMIZED_EXECUTION`
    cudnn: bool = True  # not `DISABLE_CUDNN`; process-wide, as in Triton
    cache_cleaning: bool = False  # `ENABLE_CACHE_CLEANING`: empty the CUDA cache after a batch
    # Process-wide in PyTorch; 0 leaves PyTorch's own choice (all cores). Set once: a later model
    # asking for another count is told so in the log (Triton keeps the first one too).
    intra_op_threads: int = 0  # `INTRA_OP_THREAD_COUNT`
    inter_op_threads: int = 0  # `INTER_OP_THREAD_COUNT`
    # `ENABLE_JIT_EXECUTOR`, `ENABLE_JIT_PROFILING`, `ENABLE_TENSOR_FUSER`: None leaves
    # PyTorch's process-wide default untouched; a value sets it, as Triton does.
    jit_executor: bool | None = None
    jit_profiling: bool | None = None
    tensor_fuser: bool | None = None

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> TorchSettings:
        name, params = config.name, string_parameters(config)
        return cls(
            inference_mode=bool_parameter(name, params, "INFERENCE_MODE", True),
            optimized_execution=not bool_parameter(name, params, "DISABLE_OPTIMIZED_EXECUTION"),
            cudnn=not bool_parameter(name, params, "DISABLE_CUDNN"),
            cache_cleaning=bool_parameter(name, params, "ENABLE_CACHE_CLEANING"),
            intra_op_threads=int_parameter(name, params, "INTRA_OP_THREAD_COUNT", 0),
            inter_op_threads=int_parameter(name, params, "INTER_OP_THREAD_COUNT", 0),
            jit_executor=_optional_flag(name, params, "ENABLE_JIT_EXECUTOR"),
            jit_profiling=_optional_flag(name, params, "ENABLE_JIT_PROFILING"),
            tensor_fuser=_optional_flag(name, params, "ENABLE_TENSOR_FUSER"),
        )


def _optional_flag(model: str, params: dict[str, str], key: str) -> bool | None:
    if not params.get(key, "").strip():
        return None
    return bool_parameter(model, params, key)
