"""Where a model's instances run: Triton's instance group rules as a pure plan, and loading one
instance at its place (a CUDA session, or a CPU one where KIND_AUTO allows it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from backends.device import NO_CUDA, Device, cuda_device_count
from backends.errors import ModelLoadError
from backends.onnxruntime._cuda import CudaOrtInstance
from backends.onnxruntime._instance import OrtInstance
from backends.onnxruntime._settings import DEFAULT_CPU_COUNT, OrtSettings
from proto import model_config_pb2 as mc

_log = logging.getLogger(__name__)

_Group = mc.ModelInstanceGroup
# Instances on each GPU when a group gives no count, as Triton's ORT backend (two on CPU).
_DEFAULT_GPU_COUNT = 1


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one instance runs, and what may happen when its device cannot be had."""

    group: str  # the instance group's name
    device: Device
    auto: bool = False  # KIND_AUTO: a GPU without a CUDA session becomes a CPU instance
    note: str = ""  # why the instance is not where its group asked (logged as a warning)


def plan_placements(
    config: mc.ModelConfig,
    cuda_device_count: int,
    default_cpu_count: int = DEFAULT_CPU_COUNT,
    *,
    no_gpu: str = NO_CUDA,
    auto_gpu: bool = True,
) -> list[Placement]:
    """One placement per instance, by Triton's rules: KIND_GPU runs `count` instances on each
    listed GPU (every GPU when none is listed), KIND_CPU `count` on CPU, KIND_AUTO as KIND_GPU
    where a GPU is available (with `auto_gpu`; else always on CPU, as a Python model's), else on
    CPU. No groups at all means one KIND_AUTO instance. A CPU group without a count runs
    `default_cpu_count` (two for ONNX Runtime, one for the others). `no_gpu`: why the backend
    has no GPU here, for a KIND_GPU group's load error and a KIND_AUTO group's note.

    Instances of a group alternate between its GPUs (count outer, GPUs inner), as Triton creates
    them, so that a light load spreads over the devices. Pure: pass the device count.
    """
    groups = list(config.instance_group)
    if not groups:
        groups = [_Group(kind=_Group.KIND_AUTO, count=1)]
    placements: list[Placement] = []
    for index, group in enumerate(groups):
        name = group.name or f"{config.name}_{index}"
        where = f"model '{config.name}': instance group '{name}'"
        auto = group.kind == _Group.KIND_AUTO and auto_gpu
        if group.kind == _Group.KIND_AUTO and not auto_gpu:
            devices, note = [Device.cpu()], ""
        else:
            explicit = bool(config.instance_group)
            devices, note = _devices(group, where, cuda_device_count, explicit, no_gpu)
        count = group.count
        if count < 1:
            count = _DEFAULT_GPU_COUNT if devices[0].is_cuda else default_cpu_count
        for _ in range(count):
            placements.extend(Placement(name, device, auto, note) for device in devices)
    return placements


def _devices(
    group: mc.ModelInstanceGroup, where: str, cuda_device_count: int, explicit: bool, no_gpu: str
) -> tuple[list[Device], str]:
    if group.kind == _Group.KIND_MODEL:
        raise ModelLoadError(f"{where} has kind KIND_MODEL, which ONNX Runtime does not support")
    if group.kind == _Group.KIND_CPU:
        if group.gpus:
            raise ModelLoadError(f"{where} has kind KIND_CPU but lists GPUs {list(group.gpus)}")
        return [Device.cpu()], ""
    if cuda_device_count < 1:
        if group.kind == _Group.KIND_GPU:
            raise ModelLoadError(f"{where} has kind KIND_GPU, but {no_gpu}")
        note = f"{where} is KIND_AUTO and runs on CPU: {no_gpu}" if explicit else ""
        return [Device.cpu()], note
    gpus = list(group.gpus) or list(range(cuda_device_count))
    for gpu in gpus:
        if not 0 <= gpu < cuda_device_count:
            raise ModelLoadError(
                f"{where} asks for GPU {gpu}, but the GPUs available are "
                f"{list(range(cuda_device_count))}"
            )
    if len(set(gpus)) != len(gpus):
        raise ModelLoadError(f"{where} lists a GPU more than once: {gpus}")
    return [Device.cuda(gpu) for gpu in gpus], ""


def load_instance(
    name: str,
    model_path: Path,
    settings: OrtSettings,
    placement: Placement,
) -> OrtInstance:
    """Open one instance where `placement` says; blocking, so call it from a thread.

    A KIND_GPU instance whose session ONNX Runtime would not put on CUDA is a load error; a
    KIND_AUTO one becomes a CPU instance, with a warning.
    """
    if placement.note:
        _log.warning("%s (instance '%s')", placement.note, name)
    if not placement.device.is_cuda:
        if settings.accelerators.asks_for_gpu:
            _log.warning(
                "instance '%s' runs on CPU: its gpu_execution_accelerator applies to GPU "
                "instances only (as in Triton)",
                name,
            )
        return OrtInstance.load(name, model_path, settings)
    device_id = placement.device.id
    if device_id >= cuda_device_count():
        why = (
            f"instance '{name}' of group '{placement.group}' cannot run on GPU {device_id}: "
            + NO_CUDA
        )
    else:
        instance = CudaOrtInstance.open(name, model_path, settings, device_id)
        if instance is not None:
            return instance
        why = (
            f"ONNX Runtime did not put instance '{name}' of group '{placement.group}' on GPU "
            f"{device_id} (CUDAExecutionProvider missing from the session: check that "
            "onnxruntime-gpu finds the CUDA 13 and cuDNN 9 libraries)"
        )
    if not placement.auto:
        raise ModelLoadError(why)
    _log.warning("%s; the group is KIND_AUTO, so it runs on CPU", why)
    return OrtInstance.load(name, model_path, settings)
