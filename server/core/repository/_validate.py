"""Checking a completed config against the backend and the model file it describes."""

from __future__ import annotations

import math
from collections.abc import Sequence

from backends import ModelSignature, TensorSignature
from proto import model_config_pb2 as mc
from server.contract.datatypes import BY_CONFIG, wire_name
from server.contract.errors import ConfigError
from server.core.repository._autocomplete import (
    AOTI_PLATFORM,
    ONNX_BACKEND,
    ONNX_PLATFORM,
    OPENVINO_BACKEND,
    PYTHON_BACKEND,
    PYTORCH_BACKEND,
    PYTORCH_PLATFORM,
)
from server.core.repository._sequence import sequence_tensors
from server.core.serving import RaggedPlan
from server.core.serving.ensemble import ENSEMBLE_PLATFORM, is_ensemble


def check_backend(config: mc.ModelConfig, python_based: bool = False) -> None:
    """ONNX, Python, PyTorch, OpenVINO and ensemble models are served, and so is any backend a
    Python-based backend's model.py runs (`python_based`); any other backend is a clear load
    error."""
    onnx = config.backend == ONNX_BACKEND and config.platform in ("", ONNX_PLATFORM)
    python = (config.backend == PYTHON_BACKEND and not config.platform) or python_based
    pytorch = config.backend == PYTORCH_BACKEND and config.platform in (
        "",
        PYTORCH_PLATFORM,
        AOTI_PLATFORM,
    )
    openvino = config.backend == OPENVINO_BACKEND and not config.platform
    served = onnx or python or pytorch or openvino
    if not (served or (is_ensemble(config) and not config.backend)):
        kind = config.backend or config.platform
        raise ConfigError(
            f"model '{config.name}': backend '{kind}' is not supported (supported: backend "
            f'"{ONNX_BACKEND}" / platform "{ONNX_PLATFORM}", backend "{PYTORCH_BACKEND}" / '
            f'platform "{PYTORCH_PLATFORM}" or "{AOTI_PLATFORM}", backend "{OPENVINO_BACKEND}", '
            f'backend "{PYTHON_BACKEND}", platform "{ENSEMBLE_PLATFORM}", or a Python-based '
            "backend: its model.py in --backend-directory, under the backend's name)"
        )
    if config.sequence_batching.iterative_sequence and config.sequence_batching.state:
        raise ConfigError(
            f"model '{config.name}': an iterative sequence cannot keep implicit state "
            "(sequence_batching state): each request is a whole sequence, so its state would "
            "never reach a next request; keep what its iterations share in the model"
        )
    if config.sequence_batching.state and config.model_transaction_policy.decoupled:
        raise ConfigError(
            f"model '{config.name}': a decoupled model cannot keep implicit state "
            "(sequence_batching state): its responses go to the client as it sends them"
        )
    if (config.batch_input or config.batch_output) and not (served and not python):
        raise ConfigError(
            f"model '{config.name}': batch_input and batch_output are for the backends that "
            "join a batch's requests into one tensor per input (ONNX Runtime, PyTorch, "
            "OpenVINO); "
            + ("a Python model receives each request apart" if python else "an ensemble has none")
        )
    if config.model_transaction_policy.decoupled and not (python or is_ensemble(config)):
        raise ConfigError(
            f"model '{config.name}': only Python models and ensembles can be decoupled "
            "(model_transaction_policy { decoupled: true })"
        )
    if config.max_batch_size < 0:
        raise ConfigError(f"model '{config.name}': max_batch_size must be >= 0")
    for group in config.instance_group:
        if openvino and (group.kind == mc.ModelInstanceGroup.KIND_GPU or group.gpus):
            raise ConfigError(
                f"unable to load model '{config.name}', Triton openVINO backend supports only "
                f"CPU device (instance group '{group.name}' asks for a GPU)"
            )
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL:
            raise ConfigError(
                f"model '{config.name}': instance group '{group.name}' has kind KIND_MODEL, "
                f"which the {config.backend} backend does not support"
            )


def check_python_io(config: mc.ModelConfig) -> None:
    """A Python model's tensors come from its config, completed by its auto_complete_config."""
    if not config.input or not config.output:
        raise ConfigError(
            f"model '{config.name}': a Python model declares its inputs and outputs in "
            "config.pbtxt or adds them in TritonPythonModel.auto_complete_config"
        )


def check_ensemble(config: mc.ModelConfig) -> None:
    """What an ensemble config must hold on its own; its steps are checked by its plan."""
    if not config.input or not config.output:
        raise ConfigError(f"ensemble '{config.name}' must declare its inputs and outputs")
    if not config.HasField("ensemble_scheduling"):
        raise ConfigError(f"ensemble '{config.name}' has no ensemble_scheduling")


def check_signature(config: mc.ModelConfig, signature: ModelSignature) -> RaggedPlan | None:
    """Every declared tensor must exist in the file with the same type and a compatible shape;
    the file's other inputs must be a sequence model's control and state tensors, or batch
    inputs. A ragged input (and a scattered output) holds a whole batch in one dimension. The
    model's ragged batching plan, if it has one."""
    plan = RaggedPlan.from_config(config)
    ragged = frozenset() if plan is None else plan.ragged | frozenset(plan.scatter)
    _check_side(config, "input", config.input, signature.inputs, ragged)
    _check_side(config, "output", config.output, signature.outputs, ragged)
    targets = frozenset() if plan is None else plan.targets
    declared = {tensor.name for tensor in config.input} | sequence_tensors(config)[0] | targets
    by_name = {tensor.name: tensor for tensor in signature.inputs}
    for tensor in signature.inputs:
        if tensor.name not in declared:
            raise ConfigError(
                f"model '{config.name}': the model file has input '{tensor.name}', "
                "which the config does not declare"
            )
    for batch_input in () if plan is None else plan.batch_inputs:
        found = by_name.get(batch_input.target)
        if found is None or BY_CONFIG[found.data_type].numpy != batch_input.dtype:
            raise ConfigError(
                f"model '{config.name}': batch input '{batch_input.target}' must be an input "
                f"of the model file of type {batch_input.dtype}, but the file's inputs are "
                f"{sorted(by_name)}"
                + ("" if found is None else f" and it is {wire_name(found.data_type)}")
            )
    return plan


def _check_side(
    config: mc.ModelConfig,
    side: str,
    declared: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput],
    actual: Sequence[TensorSignature],
    ragged: frozenset[str],
) -> None:
    by_name = {tensor.name: tensor for tensor in actual}
    seen: set[str] = set()
    for tensor in declared:
        if tensor.name in seen:
            raise ConfigError(f"model '{config.name}': {side} '{tensor.name}' is declared twice")
        seen.add(tensor.name)
        model_dims = list(tensor.dims)
        if tensor.HasField("reshape"):
            model_dims = list(tensor.reshape.shape)
            _check_reshape(config, side, tensor.name, list(tensor.dims), model_dims)
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
        if tensor.name not in ragged:
            _check_shape(config, side, tensor.name, model_dims, found.shape)
        elif side == "input" and len(found.shape) != 1:
            raise ConfigError(
                f"model '{config.name}': input '{tensor.name}' allows ragged batches, so the "
                f"model file must take it in one dimension (the batch's elements end to end), "
                f"but it expects {list(found.shape)}"
            )


def _check_reshape(
    config: mc.ModelConfig, side: str, name: str, dims: list[int], shape: list[int]
) -> None:
    """`dims` (the client's view) and `reshape` (the file's) must hold as many elements."""
    if -1 in dims or -1 in shape:
        return  # checked per request
    if math.prod(dims) != math.prod(shape):
        raise ConfigError(
            f"model '{config.name}': {side} '{name}' has dims {dims} ({math.prod(dims)} "
            f"elements) but reshape {shape} ({math.prod(shape)} elements)"
        )


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
