"""CUDA shared memory: device regions that clients register by CUDA IPC handle, that requests read
inputs from (as CuPy views, no copy) and write outputs to (Triton's CUDA shared memory
extension), every access bounds-checked as for system shared memory."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends import cuda_available, cuda_device_count, import_cupy, is_device_array
from server.contract.core import NO_CUDA_SHM
from server.contract.errors import (
    AlreadyExistsError,
    InvalidInputError,
    RegionNotFoundError,
    UnsupportedError,
)
from server.core.shared_memory.system import check_bounds, check_fits

_log = logging.getLogger(__name__)

CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)


@dataclass(slots=True)
class CudaRegion:
    """One registered region: `byte_size` bytes at `address` on GPU `device_id`."""

    name: str
    device_id: int
    byte_size: int
    address: int  # where the IPC handle is mapped in this process


class CudaSharedMemoryRegistry:
    """The registered CUDA regions; used on the event loop only. Needs CUDA only to register."""

    def __init__(self) -> None:
        self._regions: dict[str, CudaRegion] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._regions

    def register(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the client's IPC handle (a raw `cudaIpcMemHandle_t`) in this process."""
        if name in self._regions:
            raise AlreadyExistsError(f"CUDA shared memory region '{name}' already in manager")
        if not cuda_available():
            raise UnsupportedError(NO_CUDA_SHM)
        if len(raw_handle) != CUDA_IPC_HANDLE_BYTES:
            raise InvalidInputError(
                f"CUDA shared memory region '{name}': raw_handle has {len(raw_handle)} bytes, a "
                f"cudaIpcMemHandle_t has {CUDA_IPC_HANDLE_BYTES}"
            )
        devices = cuda_device_count()
        if not 0 <= device_id < devices:
            raise InvalidInputError(
                f"CUDA shared memory region '{name}': device {device_id} does not exist here "
                f"(devices: {list(range(devices))})"
            )
        cupy = import_cupy()
        try:
            with cupy.cuda.Device(device_id):
                address = cupy.cuda.runtime.ipcOpenMemHandle(bytes(raw_handle))
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            raise InvalidInputError(
                f"unable to open CUDA shared memory region '{name}' on device {device_id}: {exc}"
            ) from exc
        self._regions[name] = CudaRegion(name, device_id, byte_size, int(address))

    def unregister(self, name: str = "") -> None:
        """One region, or all of them when `name` is empty."""
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                cupy = import_cupy()
                try:
                    with cupy.cuda.Device(region.device_id):
                        cupy.cuda.runtime.ipcCloseMemHandle(region.address)
                except cupy.cuda.runtime.CUDARuntimeError as exc:  # gone with its client
                    _log.warning("closing CUDA shared memory region '%s': %s", each, exc)

    def status(self, name: str = "") -> list[CudaRegion]:
        if not name:
            return list(self._regions.values())
        return [self._region(name)]

    def read_device(
        self, name: str, offset: int, byte_size: int, dtype: np.dtype[Any], shape: tuple[int, ...]
    ) -> Any:
        """A CuPy array of `shape` viewing `byte_size` bytes at `offset` of the region (no copy);
        the byte size must be exactly what the shape and dtype take."""
        region = self._region(name)
        check_bounds(name, region.byte_size, offset, byte_size)
        expected = math.prod(shape) * dtype.itemsize
        if byte_size != expected:
            raise InvalidInputError(
                f"CUDA shared memory region '{name}': {byte_size} bytes given for a {dtype} "
                f"tensor of shape {list(shape)}, which takes {expected}"
            )
        cupy = import_cupy()
        with cupy.cuda.Device(region.device_id):
            if byte_size == 0:
                return cupy.empty(shape, dtype)
            memory = cupy.cuda.UnownedMemory(
                region.address + offset, byte_size, region, region.device_id
            )
            return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """A host copy of `byte_size` bytes at `offset` (for BYTES tensors, parsed on the host)."""
        region = self._region(name)
        check_bounds(name, region.byte_size, offset, byte_size)
        data = np.empty(byte_size, np.uint8)
        if byte_size:
            cupy = import_cupy()
            runtime = cupy.cuda.runtime
            with cupy.cuda.Device(region.device_id):
                runtime.memcpy(
                    data.ctypes.data, region.address + offset, byte_size, runtime.memcpyDeviceToHost
                )
        return data.tobytes()

    def write(self, name: str, offset: int, byte_size: int, data: Any) -> None:
        """Copy an output (host bytes, a NumPy array or a device array) to `offset`; it must fit
        in `byte_size` and in the region. Synchronous: the region is the client's to read next."""
        region = self._region(name)
        source = _contiguous(data)
        check_fits(name, int(source.nbytes), byte_size)
        check_bounds(name, region.byte_size, offset, byte_size)
        if not source.nbytes:
            return
        cupy = import_cupy()
        runtime = cupy.cuda.runtime
        with cupy.cuda.Device(region.device_id):
            if is_device_array(source):
                address, kind = source.data.ptr, runtime.memcpyDefault  # from any GPU (UVA)
            else:
                address, kind = source.ctypes.data, runtime.memcpyHostToDevice
            runtime.memcpy(region.address + offset, address, source.nbytes, kind)
            # cudaMemcpy may return before a device-to-device or pageable copy has landed; the
            # client reads the region as soon as the answer arrives.
            runtime.streamSynchronize(0)

    def _region(self, name: str) -> CudaRegion:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFoundError(f"Unable to find cuda shared memory region: '{name}'")
        return region


def _contiguous(data: Any) -> Any:
    # Bytes (encoded BYTES outputs) and NumPy arrays stay on the host; device arrays on theirs.
    if isinstance(data, bytes):
        return np.frombuffer(data, np.uint8)
    if is_device_array(data):
        return data if data.flags.c_contiguous else import_cupy().ascontiguousarray(data)
    return np.ascontiguousarray(data)
