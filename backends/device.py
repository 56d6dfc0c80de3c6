"""Where arrays live: NumPy on the CPU, CuPy on a CUDA device (imported lazily, only on the GPU
path); the usable cores, CUDA discovery that never raises, device memory, per-instance streams,
and the growing staging buffers that batches are assembled in."""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import importlib
import io
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from backends.errors import ModelLoadError

_log = logging.getLogger(__name__)

CUDA_PROVIDER = "CUDAExecutionProvider"
NO_CUDA = (
    "no CUDA device is available: a GPU, a driver and the gpu extra (onnxruntime-gpu with "
    "CUDAExecutionProvider and cupy-cuda13x: pip install 'convoy[gpu]') are all needed"
)
_MIN_BLOCK_BYTES = 64 * 1024  # staging blocks start here, so small batches never regrow


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (taskset, a container's cpuset)."""
    return len(os.sched_getaffinity(0))


class DeviceKind(enum.Enum):
    """What kind of memory an instance computes in."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass(frozen=True, slots=True)
class Device:
    """One place to run: the CPU, or a CUDA device by ordinal."""

    kind: DeviceKind
    id: int = 0  # the CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them); 0 on CPU

    @classmethod
    def cpu(cls) -> Device:
        return cls(DeviceKind.CPU)

    @classmethod
    def cuda(cls, device_id: int) -> Device:
        return cls(DeviceKind.CUDA, device_id)

    @property
    def is_cuda(self) -> bool:
        return self.kind is DeviceKind.CUDA

    def __str__(self) -> str:
        return f"cuda:{self.id}" if self.is_cuda else "cpu"


def cuda_device_count() -> int:
    """CUDA devices Convoy can use: 0 unless ONNX Runtime is the GPU build, CuPy imports and a
    driver answers. Never raises (a CPU install, a missing driver, a broken CuPy all mean 0).

    The GPU build lists CUDAExecutionProvider even without a driver or CUDA libraries, so the
    device count comes from CuPy; whether a session really lands on CUDA is checked per session.
    """
    try:
        if CUDA_PROVIDER not in ort.get_available_providers():
            return 0
        cupy = importlib.import_module("cupy")
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, CUDARuntimeError, a CuPy that cannot find its libraries
        return 0


def driver_device_count() -> int:
    """CUDA devices the NVIDIA driver reports to this process (CUDA_VISIBLE_DEVICES applies), with
    no CUDA library of Python's: what a Python model's own framework will find. 0 without a
    driver; never raises."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except OSError:  # no driver library: no GPU
        return 0


def cuda_available() -> bool:
    """Whether CUDA instances and CUDA shared memory can work here; never raises."""
    return cuda_device_count() > 0


def import_cupy() -> Any:
    """CuPy, on the GPU path only; a clear load error where it is missing."""
    try:
        return importlib.import_module("cupy")
    except Exception as exc:
        raise ModelLoadError(f"CuPy cannot be imported ({exc}); {NO_CUDA}") from exc


@functools.cache
def preload_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries of the pip wheels once, before the first CUDA session
    (onnxruntime-gpu finds them only this way when no system CUDA is installed)."""
    preload = getattr(ort, "preload_dlls", None)  # onnxruntime-gpu >= 1.21
    if preload is None:
        return
    # It reports a library it cannot load on stdout and goes on: that goes to the log instead.
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            preload()
    except Exception as exc:  # the session then reports what it cannot load
        _log.warning("onnxruntime.preload_dlls() failed: %s", exc)
    for line in printed.getvalue().splitlines():
        if line.strip():
            _log.warning("onnxruntime.preload_dlls(): %s", line.strip())


def device_memory(device_id: int) -> tuple[int, int]:
    """(free, total) bytes of one CUDA device, from cudaMemGetInfo."""
    cupy = import_cupy()
    with cupy.cuda.Device(device_id):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def cuda_memory_total_bytes() -> int:
    """Total memory of every usable CUDA device; 0 without CUDA. Never raises."""
    try:
        return sum(device_memory(index)[1] for index in range(cuda_device_count()))
    except Exception:  # a driver that answers the count but not the memory: treat as no GPU
        return 0


def new_stream(device_id: int) -> Any:
    """A CUDA stream of its own for one instance; non-blocking, so it never waits for work on
    the legacy default stream (other libraries, synchronous copies)."""
    cupy = import_cupy()
    with cupy.cuda.Device(device_id):
        return cupy.cuda.Stream(non_blocking=True)


def is_device_array(array: Any) -> bool:
    """Whether an array lives in CUDA memory (CuPy, or anything with the CUDA array interface)."""
    return not isinstance(array, np.ndarray) and hasattr(array, "__cuda_array_interface__")


def on_host(array: Any) -> npt.NDArray[Any]:
    """The array in host memory: NumPy as it is, a CuPy array copied back (`get`)."""
    if isinstance(array, np.ndarray):
        return array
    if is_device_array(array):
        return array.get()  # type: ignore[no-any-return]
    return np.asarray(array)


def host_tensors(tensors: Mapping[str, Any]) -> Mapping[str, npt.NDArray[Any]]:
    """A request's tensors in host memory; the same mapping when all of them already are."""
    for array in tensors.values():  # a loop: a generator costs more on every batch
        if not isinstance(array, np.ndarray):
            return {name: on_host(array) for name, array in tensors.items()}
    return tensors


_Block = TypeVar("_Block")


class GrowingBuffer(Generic[_Block]):
    """One memory block reused from batch to batch; a batch that needs more replaces it with a
    block of the next power of two, so a steady load allocates nothing. Pinned host memory or
    device memory on CUDA; any bytes-like block where `allocate` says so (tests: `bytearray`).

    Used by one worker thread; the caller makes sure the previous batch's copies are finished
    before it reserves again (the CUDA instance synchronizes its stream at the end of a batch).
    """

    def __init__(self, allocate: Callable[[int], _Block], min_bytes: int = _MIN_BLOCK_BYTES):
        self._allocate = allocate
        self._min_bytes = min_bytes
        self._block: _Block | None = None
        self.capacity_bytes = 0  # size of the current block; 0 before the first reserve
        self.allocations = 0  # blocks allocated so far

    def reserve(self, nbytes: int) -> _Block:
        """The block, at least `nbytes` long; its contents are undefined."""
        if self._block is None or nbytes > self.capacity_bytes:
            capacity = max(self._min_bytes, 1 << max(nbytes - 1, 0).bit_length())
            self._block = None  # drop the old block before allocating its successor
            self._block = self._allocate(capacity)
            self.capacity_bytes = capacity
            self.allocations += 1
        return self._block


def gather(arrays: Sequence[npt.NDArray[Any]], block: Any) -> npt.NDArray[Any]:
    """Requests' arrays of one input written one after another into `block` (any buffer of
    enough bytes), returned as the batch array viewing it: the only host copy assembly makes."""
    first = arrays[0]
    if len(arrays) == 1:
        shape: tuple[int, ...] = first.shape
    else:
        shape = (sum(array.shape[0] for array in arrays), *first.shape[1:])
    batch = np.frombuffer(block, dtype=first.dtype, count=math.prod(shape)).reshape(shape)
    if len(arrays) == 1:
        np.copyto(batch, first)
        return batch
    start = 0
    for array in arrays:
        batch[start : start + len(array)] = array
        start += len(array)
    return batch


def pinned_empty(cupy: Any, shape: Sequence[int], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """A NumPy array in page-locked memory from CuPy's pinned pool: the block goes back to the
    pool when the array (and every view of it) is dropped, so answers may outlive the batch."""
    count = math.prod(shape)
    if count == 0:
        return np.empty(tuple(shape), dtype)
    memory = cupy.cuda.alloc_pinned_memory(count * dtype.itemsize)
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(tuple(shape))
