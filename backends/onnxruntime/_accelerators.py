"""`optimization { execution_accelerators { ... } }` as ONNX Runtime execution providers, read as
Triton's ONNX Runtime backend reads them: `tensorrt` (with its options) and `cuda` on GPU
instances, `openvino` on CPU ones. Pure, except `check_available`, which asks the installed
ONNX Runtime; a provider it lacks is a load error naming the package that brings it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from backends.config import is_digits
from backends.errors import ModelLoadError
from proto import model_config_pb2 as mc

TENSORRT_PROVIDER = "TensorrtExecutionProvider"
OPENVINO_PROVIDER = "OpenVINOExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"

# Where a provider comes from, for the error when the installed ONNX Runtime lacks it.
PROVIDER_PACKAGES = {
    TENSORRT_PROVIDER: (
        "onnxruntime-gpu with NVIDIA's TensorRT libraries (pip install 'convoy[gpu]' tensorrt-cu13)"
    ),
    OPENVINO_PROVIDER: (
        "onnxruntime-openvino (pip install onnxruntime-openvino in place of onnxruntime: both "
        "own the onnxruntime/ folder)"
    ),
}
# Triton's TensorRT accelerator parameters passed to the provider under the same name, by kind.
_TRT_BOOLS = frozenset(
    {
        "trt_dla_enable",
        "trt_engine_cache_enable",
        "trt_dump_subgraphs",
        "trt_force_sequential_engine_build",
        "trt_context_memory_sharing_enable",
        "trt_layer_norm_fp32_fallback",
        "trt_timing_cache_enable",
        "trt_force_timing_cache",
        "trt_detailed_build_log",
        "trt_build_heuristics_enable",
        "trt_sparsity_enable",
        "trt_cuda_graph_enable",
        "trt_dump_ep_context_model",
    }
)
_TRT_INTS = frozenset(
    {
        "trt_max_partition_iterations",
        "trt_min_subgraph_size",
        "trt_dla_core",
        "trt_builder_optimization_level",
        "trt_auxiliary_streams",
        "trt_ep_context_embed_mode",
    }
)
_TRT_STRINGS = frozenset(
    {
        "trt_engine_cache_path",
        "trt_engine_cache_prefix",
        "trt_timing_cache_path",
        "trt_tactic_sources",
        "trt_extra_plugin_lib_paths",
        "trt_profile_min_shapes",
        "trt_profile_max_shapes",
        "trt_profile_opt_shapes",
        "trt_ep_context_file_path",
    }
)
_PRECISIONS = {"FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable", "INT8": "trt_int8_enable"}
_BOOLS = {"1": "1", "true": "1", "0": "0", "false": "0"}

Provider = tuple[str, dict[str, str]]  # an ONNX Runtime provider name and its options


@dataclass(frozen=True, slots=True)
class Accelerators:
    """The providers a config asks for, before the device's own (CUDA or CPU) ones."""

    tensorrt: dict[str, str] | None = None  # TensorRT provider options; None: not asked for
    cuda_options: dict[str, str] = field(default_factory=dict)  # from the `cuda` accelerator
    openvino: dict[str, str] | None = None  # OpenVINO provider options; None: not asked for

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> Accelerators:
        asked = config.optimization.execution_accelerators
        tensorrt: dict[str, str] | None = None
        cuda: dict[str, str] = {}
        for accelerator in asked.gpu_execution_accelerator:
            if accelerator.name == "tensorrt":
                tensorrt = _tensorrt_options(config.name, accelerator.parameters)
            elif accelerator.name == "cuda":
                cuda.update(accelerator.parameters)
            else:
                raise _unknown(config.name, accelerator.name)
        openvino: dict[str, str] | None = None
        for accelerator in asked.cpu_execution_accelerator:
            if accelerator.name != "openvino":
                raise _unknown(config.name, accelerator.name)
            openvino = {"device_type": "CPU", **accelerator.parameters}
        return cls(tensorrt, cuda, openvino)

    @property
    def asks_for_gpu(self) -> bool:
        return self.tensorrt is not None or bool(self.cuda_options)

    def cpu_providers(self) -> list[Provider]:
        """A CPU instance's providers in ONNX Runtime's order of preference."""
        providers: list[Provider] = []
        if self.openvino is not None:
            providers.append((OPENVINO_PROVIDER, dict(self.openvino)))
        providers.append((CPU_PROVIDER, {}))
        return providers

    def gpu_providers(self, cuda: Provider) -> list[Provider]:
        """A GPU instance's providers: TensorRT (on the CUDA provider's device and stream) when
        asked for, then `cuda` with the `cuda` accelerator's options, then the CPU."""
        name, options = cuda
        providers: list[Provider] = []
        if self.tensorrt is not None:
            placed: dict[str, str] = {
                k: options[k] for k in ("device_id", "user_compute_stream") if k in options
            }
            if "user_compute_stream" in placed:
                placed["has_user_compute_stream"] = "1"
            providers.append((TENSORRT_PROVIDER, {**self.tensorrt, **placed}))
        providers.append((name, {**self.cuda_options, **options}))
        providers.append((CPU_PROVIDER, {}))
        return providers


def check_available(who: str, providers: Sequence[Provider], available: Iterable[str]) -> None:
    """Every accelerator provider must be in this ONNX Runtime: never a silent fall-back.
    `who` names the instance in the error."""
    present = set(available)
    for name, _ in providers:
        if name in PROVIDER_PACKAGES and name not in present:
            raise ModelLoadError(
                f"{who}: the execution accelerator needs {name}, which this ONNX "
                f"Runtime does not have (it has {sorted(present)}); it comes with "
                + PROVIDER_PACKAGES[name]
            )


def check_used(who: str, providers: Sequence[Provider], used: Sequence[str]) -> None:
    """After the session is made: every accelerator asked for must be among its providers."""
    for name, _ in providers:
        if name in PROVIDER_PACKAGES and name not in used:
            raise ModelLoadError(
                f"{who}: ONNX Runtime made the session without {name} (it runs "
                f"{list(used)}); the accelerator's libraries did not load"
            )


def _tensorrt_options(model: str, parameters: Mapping[str, str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for key, value in parameters.items():
        if key == "precision_mode":
            if value in _PRECISIONS:
                options[_PRECISIONS[value]] = "1"
            elif value != "FP32":
                raise ModelLoadError(
                    f"model '{model}': unsupported precision mode '{value}' is requested"
                )
        elif key == "max_workspace_size_bytes":
            options["trt_max_workspace_size"] = _integer(model, key, value)
        elif key == "int8_calibration_table_name":
            options["trt_int8_calibration_table_name"] = value
        elif key == "int8_use_native_calibration_table":
            options["trt_int8_use_native_calibration_table"] = _flag(model, key, value)
        elif key in _TRT_BOOLS:
            options[key] = _flag(model, key, value)
        elif key in _TRT_INTS:
            options[key] = _integer(model, key, value, signed=True)
        elif key in _TRT_STRINGS:
            options[key] = value
        else:
            raise ModelLoadError(
                f"model '{model}': unknown parameter '{key}' is provided for TensorRT "
                "Execution Accelerator"
            )
    return {key: value for key, value in options.items() if value != ""}


def _integer(model: str, key: str, value: str, signed: bool = False) -> str:
    digits = value[1:] if signed and value.startswith("-") else value
    if not is_digits(digits):
        raise ModelLoadError(
            f"model '{model}': TensorRT parameter '{key}' must be an integer, got '{value}'"
        )
    return value


def _flag(model: str, key: str, value: str) -> str:
    flag = _BOOLS.get(value.strip().lower())
    if flag is None:
        raise ModelLoadError(
            f"model '{model}': TensorRT parameter '{key}' must be 0, 1, false or true, "
            f"got '{value}'"
        )
    return flag


def _unknown(model: str, name: str) -> ModelLoadError:
    return ModelLoadError(f"model '{model}': unknown Execution Accelerator '{name}' is requested")
