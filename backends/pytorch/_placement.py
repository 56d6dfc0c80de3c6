"""Where a PyTorch model's instances run: Triton's instance group rules over the CUDA devices
torch itself sees (a CPU build of torch sees none)."""

from __future__ import annotations

from backends.onnxruntime._placement import Placement, plan_placements
from backends.pytorch._runtime import torch_cuda_device_count
from proto import model_config_pb2 as mc

_NO_CUDA = (
    "torch sees no CUDA device (torch.cuda.is_available() is false: a GPU, a driver and a CUDA "
    "build of torch are needed)"
)


def torch_placements(config: mc.ModelConfig) -> list[Placement]:
    """One placement per instance; a KIND_GPU group without a CUDA device is a load error, a
    KIND_AUTO one runs on CPU. A CPU group without a count runs one instance, as in Triton."""
    return plan_placements(config, torch_cuda_device_count(), 1, no_gpu=_NO_CUDA)
