"""`SharedMemory`: the registered regions of both kinds (system and CUDA) behind the one read and
one write that both front ends' codecs carry tensors with, and the rules for a kind this server
does not serve."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends import is_device_array, on_host
from server.contract.core import NO_CUDA_SHM
from server.contract.datatypes import DataType, decode_raw, encode_raw
from server.contract.errors import RegionNotFoundError, UnsupportedError
from server.contract.requests import Location
from server.core.shared_memory.cuda import CudaRegion, CudaSharedMemoryRegistry
from server.core.shared_memory.system import SharedMemoryRegistry

NO_SYSTEM_SHM = "system shared memory is not enabled in this server"


class SharedMemory:
    """The system registry (None: disabled) and the CUDA one (None: no usable GPU), which the
    gRPC and HTTP front ends share, so a region registered through one serves the other."""

    def __init__(
        self,
        system: SharedMemoryRegistry | None = None,
        cuda: CudaSharedMemoryRegistry | None = None,
    ) -> None:
        self._system = system
        self._cuda = cuda

    @property
    def system(self) -> SharedMemoryRegistry:
        """The system registry; where it is disabled, the refusal both front ends answer."""
        if self._system is None:
            raise UnsupportedError(NO_SYSTEM_SHM)
        return self._system

    @property
    def cuda(self) -> CudaSharedMemoryRegistry:
        """The CUDA registry; without a usable GPU, the refusal both front ends answer."""
        if self._cuda is None:
            raise UnsupportedError(NO_CUDA_SHM)
        return self._cuda

    @property
    def serves_cuda(self) -> bool:
        """Whether CUDA regions can be registered (server metadata then lists the extension)."""
        return self._cuda is not None

    def cuda_status(self, name: str = "") -> list[CudaRegion]:
        """One CUDA region, or all of them when `name` is empty. Without a GPU there are none:
        listing them all succeeds (clients list them before cleaning up), naming one is refused."""
        if self._cuda is None and not name:
            return []
        return self.cuda.status(name)

    def cuda_unregister(self, name: str = "") -> None:
        """One CUDA region, or all of them when `name` is empty (nothing to do without a GPU)."""
        if self._cuda is not None or name:
            self.cuda.unregister(name)

    def close(self) -> None:
        """Unregister every region of both kinds (at shutdown)."""
        if self._system is not None:
            self._system.unregister()
        if self._cuda is not None:
            self._cuda.unregister()

    def read(
        self, name: str, datatype: DataType, shape: tuple[int, ...], location: Location
    ) -> Any:
        """Input `name` from its region: from a CUDA one a CuPy view without a copy (BYTES are
        parsed on the host), from a system one a NumPy array of its bytes."""
        cuda = self._cuda_holding(location)
        if cuda is not None:
            if datatype.wire == "BYTES":
                return decode_raw(name, datatype, shape, cuda.read(*location))
            return cuda.read_device(*location, datatype.numpy, shape)
        return decode_raw(name, datatype, shape, self._system_holding(location).read(*location))

    def write(self, location: Location, datatype: DataType, array: Any) -> None:
        """An output to its region: a CUDA one takes device arrays without a trip through the host
        and host arrays without a bytes copy, a system one the encoded bytes."""
        cuda = self._cuda_holding(location)
        if cuda is not None:
            cuda.write(*location, _for_device(datatype, array))
        else:
            data = encode_raw(datatype, on_host(array))
            self._system_holding(location).write(*location, data)

    def _cuda_holding(self, location: Location) -> CudaSharedMemoryRegistry | None:
        if self._cuda is not None and location[0] in self._cuda:
            return self._cuda
        return None

    def _system_holding(self, location: Location) -> SharedMemoryRegistry:
        # A name neither kind knows is Triton's NOT_FOUND, in its words for either kind.
        system = self.system
        if location[0] not in system:
            raise RegionNotFoundError(f"Unable to find shared memory region: '{location[0]}'")
        return system


def _for_device(datatype: DataType, array: Any) -> Any:
    # What a CUDA region receives: device arrays as they are, host ones without a bytes copy.
    if datatype.wire == "BYTES":
        return encode_raw(datatype, on_host(array))
    if is_device_array(array):
        return array
    return np.ascontiguousarray(array, dtype=datatype.numpy)
