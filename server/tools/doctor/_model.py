"""One model directory checked as the server would load it, without loading it: the config read,
completed and validated by the repository's own functions against the model file's signature
(read from one session opened where the loader would open the first instance)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from backends import (
    BackendError,
    ModelSignature,
    OrtSettings,
    PythonSettings,
    cuda_device_count,
    load_instance,
    plan_placements,
    python_placements,
)
from batching import BatchingError, BatchPolicy
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError, ServerError
from server.core.repository import (
    AutoComplete,
    autocomplete,
    check_backend,
    check_signature,
    fill_identity,
    footprint_bytes,
    list_versions,
    python_backend_file,
    read_config,
    select_versions,
)
from server.core.serving.ensemble import is_ensemble
from server.tools._measured import MeasuredExecution, read_measured
from server.tools.doctor._batching import check_delay, check_queue, measure_execution, waits
from server.tools.doctor._examined import DoctorSettings, Examined
from server.tools.doctor._files import CONFIG_FILENAME, check_directories
from server.tools.doctor._findings import Check, Severity
from server.tools.doctor._signature import backend_fix, diagnose

PYTHON_BACKEND = "python"
ONNX_BACKEND = "onnxruntime"


async def examine_model(name: str, path: Path, settings: DoctorSettings) -> Examined:
    """Every check of one model that needs only its own directory."""
    examined = Examined(name, path)
    check_directories(examined)
    config_path = path / CONFIG_FILENAME
    try:
        config = fill_identity(read_config(path) or mc.ModelConfig(), name)
    except (ConfigError, OSError) as exc:
        examined.add(Severity.ERROR, Check.CONFIG, str(exc), config_path, "")
        return examined
    try:
        backend_file = python_backend_file(config, settings.backend_directory)
        check_backend(config, python_based=backend_file is not None)
    except ConfigError as exc:
        examined.add(Severity.ERROR, Check.BACKEND, str(exc), config_path, backend_fix(config))
        return examined
    if is_ensemble(config):
        examined.config = config  # its steps are checked against the other models' configs
        return examined
    try:
        versions = select_versions(name, config.version_policy, list_versions(path))
    except (ConfigError, OSError) as exc:
        examined.add(Severity.ERROR, Check.VERSIONS, str(exc), config_path, "")
        return examined
    if not versions:
        examined.add(
            Severity.ERROR,
            Check.VERSIONS,
            f"model '{name}': no version directory matches its version policy",
            path,
            f"put {config.default_model_filename} in a numbered version directory, "
            f"e.g. {path / '1' / config.default_model_filename}",
        )
        return examined
    for version in versions:
        newest = version == versions[-1]
        await _examine_version(examined, config, version, newest, settings, backend_file)
    if examined.config is not None:
        check_queue(examined, examined.config, config_path)
    return examined


async def _examine_version(
    examined: Examined,
    config: mc.ModelConfig,
    version: int,
    newest: bool,
    settings: DoctorSettings,
    backend_file: Path | None = None,
) -> None:
    """One version's file against the config (a Python-based backend's model.py, if one runs
    it); the newest also gives the completed config the repository-wide checks read, and is
    timed for the queue delay check."""
    model_file = backend_file or examined.path / str(version) / config.default_model_filename
    if not model_file.is_file():
        examined.add(
            Severity.ERROR,
            Check.MODEL_FILE,
            f"model '{config.name}' version {version}: '{model_file}' not found",
            model_file.parent,
            "put the model file there, or set default_model_filename to the file's name",
        )
        return
    if config.backend == PYTHON_BACKEND or backend_file is not None:
        _python_version(examined, config, model_file, settings.completion)
        return
    if config.backend != ONNX_BACKEND:
        examined.add(
            Severity.INFO,
            Check.SIGNATURE,
            f"model '{config.name}': doctor opens ONNX models only; the {config.backend} "
            "backend's file is not checked against the config",
            model_file,
            "",
        )
        return
    try:
        placements = plan_placements(config, cuda_device_count())
        instance = await asyncio.to_thread(
            load_instance,
            f"{config.name}_{version}_doctor",
            model_file,
            OrtSettings.from_config(config),
            placements[0],
        )
    except (ServerError, BackendError) as exc:
        examined.add(Severity.ERROR, Check.MODEL_FILE, str(exc), model_file, "")
        return
    try:
        effective = _checked(examined, config, instance.signature, settings.completion)
        if effective is None:
            return
        examined.memory_bytes += footprint_bytes(
            effective, model_file.stat().st_size, len(placements)
        )
        examined.gpu_copies += sum(1 for p in placements if p.device.is_cuda)
        if newest:
            examined.config = effective
            if waits(effective):
                declared = _declared_measurement(examined.path / CONFIG_FILENAME)
                measured = declared
                if measured is None and settings.measure:
                    measured = await measure_execution(effective, instance)
                if measured is not None:
                    check_delay(examined, effective, measured, declared=declared is not None)
    finally:
        await asyncio.to_thread(instance.close)


def _checked(
    examined: Examined,
    config: mc.ModelConfig,
    signature: ModelSignature,
    completion: AutoComplete,
) -> mc.ModelConfig | None:
    """The completed config, or None after a finding that the server would refuse it."""
    config_path = examined.path / CONFIG_FILENAME
    effective = autocomplete(config, signature, completion, cuda_device_count=cuda_device_count())
    try:
        check_signature(effective, signature)
    except ConfigError as exc:
        check, fix = diagnose(effective, signature)
        examined.add(Severity.ERROR, check, str(exc), config_path, fix)
        return None
    try:
        BatchPolicy.from_config(effective)
    except BatchingError as exc:
        examined.add(Severity.ERROR, Check.CONFIG, str(exc), config_path, "")
        return None
    return effective


def _python_version(
    examined: Examined, config: mc.ModelConfig, model_file: Path, completion: AutoComplete
) -> None:
    # As the loader completes a Python model: one instance where a group gives no count.
    effective = autocomplete(config, ModelSignature((), ()), completion, default_instance_count=1)
    if not effective.input or not effective.output:
        examined.add(
            Severity.INFO,
            Check.SIGNATURE,
            f"model '{config.name}': its inputs and outputs come from model.py's "
            "auto_complete_config, which doctor does not run",
            model_file,
            "",
        )
    try:  # its parameters as the loader reads them, and where it would place its instances
        PythonSettings.from_config(config)
        placements = python_placements(config)
    except BackendError as exc:
        examined.add(Severity.ERROR, Check.CONFIG, str(exc), examined.path / CONFIG_FILENAME, "")
        return
    size = model_file.stat().st_size
    examined.memory_bytes += footprint_bytes(effective, size, len(placements))
    examined.config = effective


def _declared_measurement(config_path: Path) -> MeasuredExecution | None:
    try:
        return read_measured(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
