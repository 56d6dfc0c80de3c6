"""Checking a completed config against the backend and the model file it describes."""

from __future__ import annotations

from collections.abc import Sequence

from backends import ModelSignature, TensorSignature
from proto import model_config_pb2 as mc
from server.datatypes import wire_name
from server.errors import ConfigError
from server.repository._autocomplete import ONNX_BACKEND, ONNX_PLATFORM


def check_backend(config: mc.ModelConfig) -> None:
    """Only ONNX models are served so far; any other backend is a clear load error."""
    if config.backend != ONNX_BACKEND or config.platform not in ("", ONNX_PLATFORM):
        kind = config.backend or config.platform
        raise ConfigError(
            f"model '{config.name}': backend '{kind}' is not supported "
            f'(supported: backend "{ONNX_BACKEND}" / platform "{ONNX_PLATFORM}")'
        )
    if config.max_batch_size < 0:
        raise ConfigError(f"model '{config.name}': max_batch_size must be >= 0")
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU or group.gpus:
            raise ConfigError(
                f"model '{config.name}': instance group '{group.name}' asks for a GPU, "
                "and this server runs on CPU only"
            )
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL:
            raise ConfigError(
                f"model '{config.name}': instance group '{group.name}' has kind KIND_MODEL, "
                "which the ONNX Runtime backend does not support"
            )


def check_signature(config: mc.ModelConfig, signature: ModelSignature) -> None:
    """Every declared tensor must exist in the file with the same type and a compatible shape."""
    _check_side(config, "input", config.input, signature.inputs)
    _check_side(config, "output", config.output, signature.outputs)
    declared = {tensor.name for tensor in config.input}
    for tensor in signature.inputs:
        if tensor.name not in declared:
            raise ConfigError(
                f"model '{config.name}': the model file has input '{tensor.name}', "
                "which the config does not declare"
            )


def _check_side(
    config: mc.ModelConfig,
    side: str,
    declared: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput],
    actual: Sequence[TensorSignature],
) -> None:
    by_name = {tensor.name: tensor for tensor in actual}
    seen: set[str] = set()
    for tensor in declared:
        if tensor.name in seen:
            raise ConfigError(f"model '{config.name}': {side} '{tensor.name}' is declared twice")
        seen.add(tensor.name)
        if tensor.HasField("reshape"):
            raise ConfigError(
                f"model '{config.name}': {side} '{tensor.name}' uses reshape, "
                "which is not supported yet"
            )
        found = by_name.get(tensor.name)
        if found is None:
            raise ConfigError(
                f"model '{config.name}': {side} '{tensor.name}' is not in the model file "
                f"(the file's {side}s: {sorted(by_name)})"
            )
        if tensor.data_type != found.data_type:
            raise ConfigError(
                f"model '{config.name}': {side} '{tensor.name}' is "
                f"{mc.DataType.Name(tensor.data_type)} in the config but "
                f"{wire_name(found.data_type)} in the model file"
            )
        _check_shape(config, side, tensor.name, list(tensor.dims), found.shape)


def _check_shape(
    config: mc.ModelConfig, side: str, name: str, dims: list[int], shape: tuple[int, ...]
) -> None:
    file_shape = list(shape)
    if config.max_batch_size > 0:
        if not file_shape or file_shape[0] != -1:
            raise ConfigError(
                f"model '{config.name}': max_batch_size is {config.max_batch_size}, but "
                f"{side} '{name}' has shape {file_shape} in the model file, with no dynamic "
                "batch dimension first; set max_batch_size: 0"
            )
        file_shape = file_shape[1:]
    compatible = len(dims) == len(file_shape) and all(
        want == have or have == -1 for want, have in zip(dims, file_shape, strict=True)
    )
    if not compatible:
        raise ConfigError(
            f"model '{config.name}': {side} '{name}' has dims {dims} in the config, but the "
            f"model file expects {file_shape}"
            + (" after the batch dimension" if config.max_batch_size > 0 else "")
        )
