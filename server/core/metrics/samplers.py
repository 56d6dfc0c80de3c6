"""Machine metrics under Triton's names: CPU from /proc, GPUs through NVML (when present)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric


class CpuSampler:
    """System CPU utilization since the previous scrape, and memory, from /proc (Linux)."""

    def __init__(self) -> None:
        self._last: tuple[int, int] | None = None  # (busy, total) jiffies at the last scrape
        self._utilization()  # the first scrape then reports the time since start

    def families(self) -> Iterator[Metric]:
        utilization = self._utilization()
        if utilization is not None:
            family = Metric("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
            family.add_sample(family.name, {}, utilization)
            yield family
        memory = _meminfo()
        if memory is not None:
            total, available = memory
            for name, value, text in (
                ("nv_cpu_memory_total_bytes", total, "CPU total memory (RAM), in bytes"),
                ("nv_cpu_memory_used_bytes", total - available, "CPU used memory (RAM), in bytes"),
            ):
                family = Metric(name, text, "gauge")
                family.add_sample(name, {}, value)
                yield family

    def _utilization(self) -> float | None:
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                fields = [int(v) for v in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])
        previous, self._last = self._last, (total - idle, total)
        if previous is None or total == previous[1]:
            return 0.0
        return (total - idle - previous[0]) / (total - previous[1])


class GpuSampler:
    """Per-GPU utilization, memory, power and energy through NVML, labelled by `gpu_uuid` under
    Triton's names.

    NVML (the `nvidia-ml-py` package of the `gpu` extra) is imported lazily; without it, or
    without a driver, there are simply no GPU metrics. A reading a device does not support (power
    on some boards) leaves out that one sample.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._energy_start_mj: dict[int, int] = {}  # per device, at start: Triton counts from there
        try:
            import pynvml
        except ImportError:  # a CPU install: no GPU metrics
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver or no device
            return
        self._nvml = pynvml
        for index in range(self._count()):
            handle = self._read(pynvml.nvmlDeviceGetHandleByIndex, index)
            energy = (
                self._read(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle) if handle else None
            )
            if energy is not None:
                self._energy_start_mj[index] = int(energy)

    def families(self) -> Iterator[Metric]:
        if self._nvml is None:
            return
        nvml = self._nvml
        families = {
            name: Metric(name, text, "gauge" if name != "nv_energy_consumption" else "counter")
            for name, text in _GPU_FAMILIES.items()
        }
        for index in range(self._count()):
            handle = self._read(nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            uuid = self._read(nvml.nvmlDeviceGetUUID, handle) or str(index)
            labels = {"gpu_uuid": uuid.decode() if isinstance(uuid, bytes) else str(uuid)}
            for name, value in self._readings(handle, index).items():
                if value is not None:
                    families[name].add_sample(name, labels, value)
        yield from families.values()

    def _readings(self, handle: Any, index: int) -> dict[str, float | None]:
        nvml = self._nvml
        rates = self._read(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._read(nvml.nvmlDeviceGetMemoryInfo, handle)
        power_mw = self._read(nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = self._read(nvml.nvmlDeviceGetPowerManagementLimit, handle)
        energy_mj = self._read(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        start_mj = self._energy_start_mj.get(index)
        return {
            "nv_gpu_utilization": None if rates is None else rates.gpu / 100,
            "nv_gpu_memory_total_bytes": None if memory is None else memory.total,
            "nv_gpu_memory_used_bytes": None if memory is None else memory.used,
            "nv_gpu_power_usage": None if power_mw is None else power_mw / 1000,
            "nv_gpu_power_limit": None if limit_mw is None else limit_mw / 1000,
            "nv_energy_consumption": (
                None if energy_mj is None or start_mj is None else (energy_mj - start_mj) / 1000
            ),
        }

    def _count(self) -> int:
        count = self._read(self._nvml.nvmlDeviceGetCount)
        return int(count) if count is not None else 0

    def _read(self, call: Callable[..., Any], *args: Any) -> Any:
        """One NVML reading, or None where the device does not support it (or is gone)."""
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return None


# Triton's GPU metric families and their help texts (power in watts, energy in joules).
_GPU_FAMILIES = {
    "nv_gpu_utilization": "GPU utilization rate [0.0 - 1.0]",
    "nv_gpu_memory_total_bytes": "GPU total memory, in bytes",
    "nv_gpu_memory_used_bytes": "GPU used memory, in bytes",
    "nv_gpu_power_usage": "GPU power usage in watts",
    "nv_gpu_power_limit": "GPU power management limit in watts",
    "nv_energy_consumption": "GPU energy consumption in joules since the Convoy server started",
}


def _meminfo() -> tuple[int, int] | None:
    values: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in values or "MemAvailable" not in values:
        return None
    return values["MemTotal"], values["MemAvailable"]
