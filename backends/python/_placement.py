"""Where a Python model's instances run, by Triton's instance group rules: KIND_GPU runs `count`
instances on each listed GPU (every GPU when none is listed), KIND_CPU and KIND_AUTO on CPU.
Each worker is told its place as Triton's python backend tells it (`model_instance_kind`,
`model_instance_device_id` in initialize's args); the model's own code puts its work there."""

from __future__ import annotations

from backends.device import driver_device_count
from backends.onnxruntime._placement import Placement, plan_placements
from proto import model_config_pb2 as mc

_NO_GPU = "the NVIDIA driver reports no CUDA device to this process"


def python_placements(config: mc.ModelConfig, gpus: int | None = None) -> list[Placement]:
    """One placement per instance. `gpus`: the CUDA devices there are (None: as the driver
    reports them, asked only when a group is KIND_GPU). A KIND_GPU group without a GPU is a
    load error."""
    if gpus is None:
        asks = any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)
        gpus = driver_device_count() if asks else 0
    return plan_placements(config, gpus, 1, no_gpu=_NO_GPU, auto_gpu=False)
