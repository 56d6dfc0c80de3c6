"""Session settings from a model's config, under the parameter names of Triton's ORT backend."""

from __future__ import annotations

from dataclasses import dataclass

import onnxruntime as ort

from backends.errors import ModelLoadError
from proto import model_config_pb2


@dataclass(frozen=True, slots=True)
class OrtSettings:
    """How each instance's session is built; one intra-op thread per instance by default."""

    intra_op_threads: int = 1  # threads inside one operator (`intra_op_thread_count`)
    inter_op_threads: int = 1  # threads across operators (`inter_op_thread_count`)
    parallel_execution: bool = False  # `execution_mode` 1 runs independent nodes in parallel
    optimize_graph: bool = True  # `optimization { graph { level: -1 } }` turns this off

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> OrtSettings:
        params = {key: value.string_value for key, value in config.parameters.items()}
        return cls(
            intra_op_threads=_int_param(config.name, params, "intra_op_thread_count", 1),
            inter_op_threads=_int_param(config.name, params, "inter_op_thread_count", 1),
            parallel_execution=_int_param(config.name, params, "execution_mode", 0) == 1,
            optimize_graph=config.optimization.graph.level != -1,
        )

    def session_options(self) -> ort.SessionOptions:
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads
        options.inter_op_num_threads = self.inter_op_threads
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL
            if self.parallel_execution
            else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.optimize_graph
            else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        return options


def _int_param(model: str, params: dict[str, str], key: str, default: int) -> int:
    raw = params.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ModelLoadError(
            f"model '{model}': parameter '{key}' must be an integer, got '{raw}'"
        ) from None
    if value < 0:
        raise ModelLoadError(f"model '{model}': parameter '{key}' must be >= 0, got {value}")
    return value
