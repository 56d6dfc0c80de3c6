"""The cache key of a request: SHA-256 over the model's name, version and content (what its
answers depend on), then every input's name, data type, shape and bytes (in name order) and the
parameters that reach the model. The request id and the requested outputs never take part, so
equal requests share one entry; the digest is the same in every process, so replicas serving
the same files share entries through Redis."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from batching import Parameters
from server.contract.datatypes import encode_bytes

_LENGTH = struct.Struct("<Q")


def version_prefix(model: str, version: int, content: bytes) -> bytes:
    """What every key of one model version starts from: its name, number and content (what
    its answers depend on), so that a reload with other files or another config misses."""
    return _field(model.encode()) + _field(str(version).encode()) + _field(content)


def request_key(
    prefix: bytes,
    arrays: Mapping[str, npt.NDArray[Any]],
    datatypes: Mapping[str, str],
    parameters: Parameters,
) -> bytes | None:
    """The key of a request's checked inputs (`datatypes`: each input's wire data type); None
    when an input is not in host memory (a CUDA shared memory region), as Triton, which hashes
    CPU tensors only."""
    digest = hashlib.sha256(prefix + _LENGTH.pack(len(arrays)))
    for name in sorted(arrays):
        array = arrays[name]
        if type(array) is not np.ndarray:
            return None
        shape = ",".join(str(dim) for dim in array.shape)
        digest.update(_field(name.encode()) + _field(datatypes[name].encode()))
        digest.update(_field(shape.encode()))
        if array.dtype == np.object_:
            digest.update(_field(encode_bytes(array)))
        else:
            digest.update(_LENGTH.pack(array.nbytes))
            digest.update(np.ascontiguousarray(array).data)
    digest.update(_LENGTH.pack(len(parameters)))
    for key in sorted(parameters):
        value = parameters[key]
        digest.update(_field(key.encode()) + _field(f"{type(value).__name__}:{value}".encode()))
    return digest.digest()


def _field(data: bytes) -> bytes:
    # Length-prefixed, so that no two different sequences of fields hash the same bytes.
    return _LENGTH.pack(len(data)) + data
