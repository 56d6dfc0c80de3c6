"""A cached response as bytes and back, for caches outside the process (Redis): a magic, a JSON
header naming each output's dtype, shape and byte count, then the outputs' bytes. No pickle: an
entry another process wrote is data, and a malformed one is an error, never code run."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from batching import TensorMap
from server.contract.datatypes import BY_WIRE, decode_raw, encode_bytes
from server.contract.errors import InvalidInputError

MAGIC = b"CVY1"
_HEADER = struct.Struct("<4sI")  # magic, header length
_BYTES = "BYTES"  # the dtype written for BYTES (object) arrays
_KINDS = "biuf"  # the dtype kinds an entry may hold besides BYTES


class CacheEntryError(ValueError):
    """Bytes that are not an entry this format wrote; the cache reads them as a miss."""


def encode_entry(outputs: TensorMap) -> bytes:
    """The outputs (host NumPy arrays) as one entry."""
    header: list[tuple[str, str, list[int], int]] = []
    blobs: list[bytes] = []
    for name, array in outputs.items():
        if array.dtype == np.object_:
            data, dtype = encode_bytes(array), _BYTES
        else:
            data, dtype = np.ascontiguousarray(array).tobytes(), array.dtype.str
        header.append((name, dtype, list(array.shape), len(data)))
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_HEADER.pack(MAGIC, len(text)), text, *blobs])


def decode_entry(entry: bytes) -> dict[str, npt.NDArray[Any]]:
    """The outputs of an entry, as read-only arrays over its bytes; CacheEntryError if it is not
    one this format wrote."""
    try:
        magic, length = _HEADER.unpack_from(entry)
        if magic != MAGIC:
            raise CacheEntryError(f"not a Convoy cache entry (starts with {magic!r})")
        header = json.loads(entry[_HEADER.size : _HEADER.size + length])
        offset = _HEADER.size + length
        outputs: dict[str, npt.NDArray[Any]] = {}
        for name, dtype, shape, size in header:
            data = entry[offset : offset + size]
            if len(data) != size:
                raise CacheEntryError(f"output '{name}' is cut short")
            outputs[name] = _array(name, dtype, tuple(shape), data)
            offset += size
    except CacheEntryError:
        raise
    except (struct.error, ValueError, TypeError) as exc:
        raise CacheEntryError(f"malformed cache entry: {exc}") from exc
    if offset != len(entry):
        raise CacheEntryError(f"{len(entry) - offset} bytes left over after the outputs")
    return outputs


def _array(name: str, dtype: str, shape: tuple[int, ...], data: bytes) -> npt.NDArray[Any]:
    if any(type(dim) is not int or dim < 0 for dim in shape):
        raise CacheEntryError(f"output '{name}' has shape {list(shape)}")
    if dtype == _BYTES:
        try:
            items = decode_raw(name, BY_WIRE[_BYTES], shape, data)
        except InvalidInputError as exc:
            raise CacheEntryError(f"output '{name}': {exc}") from exc
        items.flags.writeable = False
        return items
    numpy_type = np.dtype(dtype)
    if numpy_type.kind not in _KINDS:
        raise CacheEntryError(f"output '{name}' has dtype {dtype}")
    return np.frombuffer(data, dtype=numpy_type).reshape(shape)
