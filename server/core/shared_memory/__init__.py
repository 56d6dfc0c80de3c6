"""Registered shared memory regions, system and CUDA, behind one read and one write
(`SharedMemory`); the core owns them, so a region registered once serves every front end."""

from server.core.shared_memory.cuda import CudaRegion, CudaSharedMemoryRegistry
from server.core.shared_memory.regions import SharedMemory
from server.core.shared_memory.system import Region, SharedMemoryRegistry

__all__ = [
    "CudaRegion",
    "CudaSharedMemoryRegistry",
    "Region",
    "SharedMemory",
    "SharedMemoryRegistry",
]
