"""Which backend runs a model version's instances: where they go, how many a group runs by
default, which GPUs the completed config may report, and how one instance opens."""

from __future__ import annotations

import logging
from pathlib import Path

from backends import (
    AotiInstance,
    Instance,
    OpenVinoInstance,
    OrtInstance,
    OrtSettings,
    Placement,
    TorchInstance,
    cuda_device_count,
    driver_device_count,
    load_instance,
    plan_placements,
    python_placements,
    torch_placements,
)
from backends.pytorch import torch_cuda_device_count
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository._autocomplete import (
    AOTI_PLATFORM,
    ONNX_BACKEND,
    OPENVINO_BACKEND,
    OPENVINO_DEFAULT_FILENAME,
    PYTHON_BACKEND,
    PYTORCH_BACKEND,
    PYTORCH_DEFAULT_FILENAME,
)
from server.core.repository._versions import is_version_name
from server.core.serving.ensemble import is_ensemble

_log = logging.getLogger(__name__)

# Instances a CPU group without a count runs: two for ONNX Runtime, one for the others (Triton).
_ORT_DEFAULT_COUNT = 2
_SERVED = (ONNX_BACKEND, PYTORCH_BACKEND, OPENVINO_BACKEND)  # the backends Convoy runs itself
# Where Python-based backends are found unless --backend-directory says otherwise (Triton's).
DEFAULT_BACKEND_DIRECTORY = "/opt/tritonserver/backends"


def detect_backend(config: mc.ModelConfig, path: Path) -> mc.ModelConfig:
    """A config naming no backend or platform gets the one its files show, as Triton's core
    picks it: `model.pt` is PyTorch, `model.xml` OpenVINO (in any version directory, or as the
    default_model_filename); anything else stays ONNX Runtime's."""
    if config.backend or config.platform or is_ensemble(config):
        return config
    for backend, filename in (
        (PYTORCH_BACKEND, PYTORCH_DEFAULT_FILENAME),
        (OPENVINO_BACKEND, OPENVINO_DEFAULT_FILENAME),
    ):
        named = config.default_model_filename == filename
        if named or any(version.joinpath(filename).is_file() for version in _versions(path)):
            detected = mc.ModelConfig()
            detected.CopyFrom(config)
            detected.backend = backend
            return detected
    return config


def _versions(path: Path) -> list[Path]:
    return [entry for entry in path.iterdir() if entry.is_dir() and is_version_name(entry.name)]


def python_backend_file(config: mc.ModelConfig, directory: Path | None) -> Path | None:
    """The model.py of the Python-based backend that runs this model, as Triton finds one:
    `<directory>/<backend>/model.py` for a backend Convoy does not serve itself, or the file its
    `runtime` names (`runtime: "model.py"`) for any backend. None: the backend is Convoy's own
    (or none is there: its load then says the backend is not supported)."""
    if config.backend == PYTHON_BACKEND or is_ensemble(config):
        return None
    own = config.backend in _SERVED
    if own and not config.runtime.endswith(".py"):
        return None
    runtime = config.runtime if config.runtime.endswith(".py") else "model.py"
    found = None if directory is None else directory / config.backend / runtime
    if found is not None and found.is_file():
        return found
    if config.runtime.endswith(".py"):
        raise ConfigError(
            f"model '{config.name}': runtime '{config.runtime}' names a Python-based backend, "
            f"but '{found or runtime}' does not exist (--backend-directory: "
            f"{directory or 'none given'})"
        )
    return None


def plan(config: mc.ModelConfig, python_based: bool = False) -> list[Placement]:
    """One placement per instance from the config as written (`python_based`: a Python-based
    backend's model.py runs the model)."""
    if config.backend == PYTHON_BACKEND or python_based:
        return python_placements(config)
    if config.backend == PYTORCH_BACKEND:
        return torch_placements(config)
    if config.backend == OPENVINO_BACKEND:
        return plan_placements(config, 0, default_cpu_count=1)  # CPU only, as in Triton
    return plan_placements(config, cuda_device_count())


def default_instance_count(config: mc.ModelConfig) -> int:
    return _ORT_DEFAULT_COUNT if config.backend == ONNX_BACKEND else 1


def device_count(config: mc.ModelConfig, python_based: bool = False) -> int:
    """The CUDA devices this backend can use, for the GPU groups of the completed config."""
    if config.backend == ONNX_BACKEND:
        return cuda_device_count()
    if config.backend == PYTORCH_BACKEND:
        return torch_cuda_device_count()
    if (config.backend == PYTHON_BACKEND or python_based) and any(
        group.kind == mc.ModelInstanceGroup.KIND_GPU for group in config.instance_group
    ):
        return driver_device_count()
    return 0


def open_instance(
    config: mc.ModelConfig, name: str, model_file: Path, placement: Placement
) -> Instance:
    """Open one ONNX Runtime, PyTorch or OpenVINO instance where `placement` says; blocking."""
    if config.backend == PYTORCH_BACKEND:
        if placement.note:
            _log.warning("%s (instance '%s')", placement.note, name)
        if config.platform == AOTI_PLATFORM:
            return AotiInstance.load(name, model_file, config, placement.device)
        return TorchInstance.load(name, model_file, config, placement.device)
    if config.backend == OPENVINO_BACKEND:
        return OpenVinoInstance.load(name, model_file, config)
    return load_instance(name, model_file, OrtSettings.from_config(config), placement)


# The completed config's report of the providers an accelerated ONNX Runtime session runs with.
PROVIDERS_PARAMETER = "convoy_execution_providers"


def report_providers(config: mc.ModelConfig, instance: Instance) -> mc.ModelConfig:
    """With execution accelerators, the completed config says which providers the session
    really runs with (ONNX Runtime's order, comma-separated), checked when it was made."""
    accelerators = config.optimization.execution_accelerators
    asked = accelerators.gpu_execution_accelerator or accelerators.cpu_execution_accelerator
    if not asked or not isinstance(instance, OrtInstance):
        return config
    reported = mc.ModelConfig()
    reported.CopyFrom(config)
    reported.parameters[PROVIDERS_PARAMETER].string_value = ",".join(instance.providers)
    return reported
