"""System shared memory: regions clients register, that requests read inputs from and write
outputs to (Triton's system shared memory extension), every access bounds-checked."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from server.contract.errors import AlreadyExistsError, InvalidInputError, RegionNotFoundError

_SHM_DIR = "/dev/shm"  # where POSIX shared memory objects live on Linux


@dataclass(slots=True)
class Region:
    """One registered region: `byte_size` bytes from `offset` of the POSIX object `key`."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap


class SharedMemoryRegistry:
    """The registered regions; used on the event loop only."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._regions

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if name in self._regions:
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        if not key.lstrip("/") or "/" in key.lstrip("/") or key.lstrip("/").startswith("."):
            raise InvalidInputError(f"shared memory key '{key}' is not a POSIX shm object name")
        path = os.path.join(_SHM_DIR, key.lstrip("/"))
        try:
            with open(path, "r+b") as file:
                size = os.fstat(file.fileno()).st_size
                if offset + byte_size > size:
                    raise InvalidInputError(
                        f"shared memory region '{name}': offset {offset} + byte_size "
                        f"{byte_size} exceeds the {size} bytes of '{key}'"
                    )
                mapping = mmap.mmap(file.fileno(), size)
        except OSError as exc:
            raise InvalidInputError(
                f"unable to open shared memory region '{name}' ('{key}'): {exc.strerror}"
            ) from exc
        self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """One region, or all of them when `name` is empty."""
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                region.mapping.close()

    def status(self, name: str = "") -> list[Region]:
        if not name:
            return list(self._regions.values())
        return [self._region(name)]

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """A copy of `byte_size` bytes at `offset` within the region."""
        region = self._region(name)
        check_bounds(name, region.byte_size, offset, byte_size)
        start = region.offset + offset
        return region.mapping[start : start + byte_size]

    def write(self, name: str, offset: int, byte_size: int, data: bytes) -> None:
        """Write `data` at `offset`; it must fit in `byte_size` and in the region."""
        region = self._region(name)
        check_fits(name, len(data), byte_size)
        check_bounds(name, region.byte_size, offset, byte_size)
        start = region.offset + offset
        region.mapping[start : start + len(data)] = data

    def _region(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFoundError(f"Unable to find system shared memory region: '{name}'")
        return region


def check_bounds(name: str, region_byte_size: int, offset: int, byte_size: int) -> None:
    """`byte_size` bytes at `offset` must lie within a region of `region_byte_size` bytes (system
    and CUDA shared memory alike)."""
    if offset < 0 or byte_size < 0 or offset + byte_size > region_byte_size:
        raise InvalidInputError(
            f"shared memory region '{name}': offset {offset} and byte size {byte_size} fall "
            f"outside its {region_byte_size} bytes"
        )


def check_fits(name: str, needed_bytes: int, byte_size: int) -> None:
    """An output of `needed_bytes` must fit in the `byte_size` bytes given for it."""
    if needed_bytes > byte_size:
        raise InvalidInputError(
            f"shared memory region '{name}': the output needs {needed_bytes} bytes, but only "
            f"{byte_size} were given for it"
        )
