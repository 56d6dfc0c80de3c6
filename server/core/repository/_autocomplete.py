"""Completing a config from the model file's signature, as Triton's auto-complete does."""

from __future__ import annotations

from dataclasses import dataclass

from backends import ModelSignature, TensorSignature
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository._sequence import sequence_tensors
from server.core.serving.ensemble import is_ensemble

ONNX_PLATFORM = "onnxruntime_onnx"
ONNX_BACKEND = "onnxruntime"
ONNX_DEFAULT_FILENAME = "model.onnx"
PYTHON_BACKEND = "python"
PYTHON_DEFAULT_FILENAME = "model.py"
PYTORCH_PLATFORM = "pytorch_libtorch"
PYTORCH_BACKEND = "pytorch"
PYTORCH_DEFAULT_FILENAME = "model.pt"
# PyTorch 2 AOTInductor packages, served by the PyTorch backend (Triton 2.6x's beta).
AOTI_PLATFORM = "torch_aoti"
AOTI_DEFAULT_FILENAME = "model.pt2"
OPENVINO_BACKEND = "openvino"
OPENVINO_DEFAULT_FILENAME = "model.xml"  # with model.bin beside it
# Backend -> its platform, as Triton pairs them (a config may give either); None: no platform.
_PLATFORMS = {ONNX_BACKEND: ONNX_PLATFORM, PYTORCH_BACKEND: PYTORCH_PLATFORM}
_DEFAULT_FILENAMES = {
    ONNX_BACKEND: ONNX_DEFAULT_FILENAME,
    PYTHON_BACKEND: PYTHON_DEFAULT_FILENAME,
    PYTORCH_BACKEND: PYTORCH_DEFAULT_FILENAME,
    OPENVINO_BACKEND: OPENVINO_DEFAULT_FILENAME,
}
DEFAULT_MAX_BATCH_SIZE = 4  # Triton's --backend-config default-max-batch-size


@dataclass(frozen=True, slots=True)
class AutoComplete:
    """How much of a config the model file may fill in (Triton's server flags)."""

    enabled: bool = True  # False: --disable-auto-complete-config; tensors must be declared
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE  # --backend-config default-max-batch-size


DEFAULT_AUTO_COMPLETE = AutoComplete()


def fill_identity(config: mc.ModelConfig, model: str) -> mc.ModelConfig:
    """Name, backend, platform, file name and version policy, before the model file is read."""
    done = mc.ModelConfig()
    done.CopyFrom(config)
    if not done.name:
        done.name = model
    elif done.name != model:
        raise ConfigError(
            f"model '{model}': config name '{done.name}' does not match its directory name"
        )
    if is_ensemble(done):
        pass  # no backend and no model file: the steps run other models
    elif not done.backend and not done.platform:
        done.backend, done.platform = ONNX_BACKEND, ONNX_PLATFORM
    elif not done.backend and done.platform == AOTI_PLATFORM:
        done.backend = PYTORCH_BACKEND
    elif not done.backend:
        done.backend = next((b for b, p in _PLATFORMS.items() if p == done.platform), "")
    elif not done.platform:
        done.platform = _PLATFORMS.get(done.backend, "")
    if not done.default_model_filename and done.platform == AOTI_PLATFORM:
        done.default_model_filename = AOTI_DEFAULT_FILENAME
    elif not done.default_model_filename:
        done.default_model_filename = _DEFAULT_FILENAMES.get(done.backend, "")
    if not done.HasField("version_policy"):
        done.version_policy.latest.num_versions = 1
    return done


def autocomplete(
    config: mc.ModelConfig,
    signature: ModelSignature,
    settings: AutoComplete = DEFAULT_AUTO_COMPLETE,
    default_instance_count: int = 2,
    cuda_device_count: int = 0,
) -> mc.ModelConfig:
    """Fill what the config leaves out (inputs, outputs, max_batch_size, instances) from the file.

    A dynamic first dimension on every tensor means the model can batch: with nothing declared,
    max_batch_size becomes the default max batch size, else 0 and dims are the full shapes. With
    auto-complete disabled only instance groups and preferred batch sizes are normalized, as
    Triton's core does for every config.
    """
    done = mc.ModelConfig()
    done.CopyFrom(config)
    if settings.enabled:
        _fill_from_file(done, signature, settings.default_max_batch_size)
    _fill_instance_groups(done, default_instance_count, cuda_device_count)
    if (
        done.HasField("dynamic_batching")
        and not done.dynamic_batching.preferred_batch_size
        and done.max_batch_size > 0
    ):
        # Triton's core reports an empty preferred list as [max_batch_size].
        done.dynamic_batching.preferred_batch_size.append(done.max_batch_size)
    return done


def _fill_from_file(
    done: mc.ModelConfig, signature: ModelSignature, default_max_batch_size: int
) -> None:
    tensors = (*signature.inputs, *signature.outputs)
    can_batch = bool(tensors) and all(len(t.shape) >= 1 and t.shape[0] == -1 for t in tensors)
    declared = bool(done.input) or bool(done.output)
    if not declared and done.max_batch_size == 0 and can_batch:
        done.max_batch_size = default_max_batch_size
    batching = done.max_batch_size > 0
    # A sequence model's control and state tensors, and batch inputs, are the server's, not
    # the client's.
    server_inputs, server_outputs = sequence_tensors(done)
    server_inputs |= {name for entry in done.batch_input for name in entry.target_name}
    if not done.input:
        for tensor in signature.inputs:
            if tensor.name not in server_inputs:
                _fill_tensor(done.input.add(), tensor, batching)
    if not done.output:
        for tensor in signature.outputs:
            if tensor.name not in server_outputs:
                _fill_tensor(done.output.add(), tensor, batching)
    if not declared and done.max_batch_size > 1 and done.WhichOneof("scheduling_choice") is None:
        done.dynamic_batching.SetInParent()


def _fill_tensor(
    target: mc.ModelInput | mc.ModelOutput, tensor: TensorSignature, batching: bool
) -> None:
    target.name = tensor.name
    target.data_type = tensor.data_type  # type: ignore[assignment]
    target.dims.extend(tensor.shape[1:] if batching else tensor.shape)


def _fill_instance_groups(config: mc.ModelConfig, default_count: int, gpus: int) -> None:
    """Report groups as the instances will run (the placement plan follows the same rules)."""
    if not config.instance_group:
        group = config.instance_group.add()
        group.kind = mc.ModelInstanceGroup.KIND_AUTO
        group.count = 1
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            on_gpu = gpus > 0 and config.backend != PYTHON_BACKEND
            group.kind = (
                mc.ModelInstanceGroup.KIND_GPU if on_gpu else mc.ModelInstanceGroup.KIND_CPU
            )
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpus))
        if group.count < 1:
            # Triton's ONNX Runtime backend runs two CPU instances when a group gives no count.
            group.count = default_count if group.kind == mc.ModelInstanceGroup.KIND_CPU else 1
