"""Where a Python model's instances run, by Triton's instance group rules: KIND_GPU runs `count`
instances on each listed GPU (every GPU when none is listed), KIND_CPU and KIND_AUTO on CPU.
Each worker is told its place as Triton's python backend tells it (`model_instance_kind`,
`model_instance_device_id` in initialize's args); the model's own code puts its work there."""

from __future__ import annotations

from backends.device import driver_device_count
from backends.errors import ModelLoadError
from backends.onnxruntime._placement import Placement, plan_placements
from proto import model_config_pb2 as mc

_Group = mc.ModelInstanceGroup


def python_placements(config: mc.ModelConfig, gpus: int | None = None) -> list[Placement]:
    """One placement per instance. `gpus`: the CUDA devices there are (None: as the driver
    reports them, asked only when a group is KIND_GPU). A KIND_GPU group without a GPU is a
    load error."""
    groups = list(config.instance_group)
    if any(group.kind == _Group.KIND_GPU for group in groups):
        gpus = driver_device_count() if gpus is None else gpus
        if gpus == 0:
            index, group = next((i, g) for i, g in enumerate(groups) if g.kind == _Group.KIND_GPU)
            name = group.name or f"{config.name}_{index}"
            raise ModelLoadError(
                f"model '{config.name}': instance group '{name}' has kind KIND_GPU, but the "
                "NVIDIA driver reports no CUDA device to this process"
            )
    on_cpu = mc.ModelConfig()
    on_cpu.CopyFrom(config)
    if not on_cpu.instance_group:
        on_cpu.instance_group.add(count=1)
    for group in on_cpu.instance_group:
        if group.kind == _Group.KIND_AUTO:  # a Python model's instances default to the CPU
            group.kind = _Group.KIND_CPU
    return plan_placements(on_cpu, gpus or 0, default_cpu_count=1)
