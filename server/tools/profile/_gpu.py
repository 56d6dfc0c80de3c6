"""GPU utilization over a measured window, sampled through NVML (nvidia-ml-py, in the gpu
extra) for the devices a version's instances run on; nothing where there is no GPU or NVML."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

from backends import Device

SAMPLE_S = 0.2


class GpuMeter:
    """Samples the utilization of `devices` (CUDA ordinals, taken as NVML indices) while on."""

    def __init__(self, devices: Sequence[Device]) -> None:
        self._ids = sorted({device.id for device in devices if device.is_cuda})
        self._samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        handles = _handles(self._ids) if self._ids else None
        if handles:
            self._task = asyncio.create_task(self._sample(handles))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def percent(self) -> float | None:
        return statistics.mean(self._samples) if self._samples else None

    async def _sample(self, handles: list[Any]) -> None:
        import pynvml

        while True:
            utilization = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
            self._samples.append(statistics.mean(utilization))
            await asyncio.sleep(SAMPLE_S)


def _handles(ids: Sequence[int]) -> list[Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(index) for index in ids]
    return None
