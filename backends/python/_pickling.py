"""How a message on a python worker's channel is pickled, and a batch's small tensors stacked.

A message is a protocol-5 pickle whose arrays are out-of-band buffers, so the pickle holds only
their shapes and dtypes: a plain array (bool, integer, float or complex, C-contiguous) as its
bytes, its dtype's string and its shape, rebuilt by `plain_array` (NumPy's own reduction pickles
the dtype as an object with its state: a larger pickle, slower at both ends); a BYTES tensor (an
object array of bytes) as its items' lengths and their concatenation, rebuilt by
`bytes_tensor`; any other array as NumPy pickles it. Runs in the worker too, so it imports
nothing from Convoy.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

# Tensors up to this size travel stacked with their batch-mates' (`stack_rows`): below it, an
# array's own cost on the channel outweighs copying it once more.
_STACKED_BYTES = 16 << 10


# This module's name in a worker (loaded by `_worker.py` as a package of its own) and in the
# server: a pickle names `bytes_tensor` and `plain_array` by either.
_MODULE_NAMES = frozenset({"convoy_python._pickling", "backends.python._pickling"})
# The dtype kinds `plain_array` carries: bool, signed and unsigned integers, floats, complex.
_PLAIN_KINDS = frozenset("biufc")


def plain_array(data: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A plain array from its bytes (as `Pickler` sends one): a view of them, not a copy."""
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def bytes_tensor(shape: tuple[int, ...], lengths: Any, data: Any) -> np.ndarray:
    """A BYTES tensor from its items' lengths and their concatenation (as `Pickler` sends it)."""
    ends = np.cumsum(np.frombuffer(lengths, dtype="<u8")).tolist()
    blob = bytes(data)
    items = np.empty(len(ends), dtype=object)
    items[:] = [blob[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]
    return items.reshape(shape)


Stacked = tuple[list[str], list[np.ndarray], list[list[int]]]  # names, arrays, rows per map


def stack_rows(maps: list[Any]) -> list[Any] | Stacked:
    """A batch's tensor maps (an execute message's inputs, a "done" message's outputs) as one
    array per name, each map's rows one after the other, when every map is a dict of the same
    names and each name's arrays are small, of one dtype (not objects) and one shape past the
    first axis; otherwise `maps` as they are. Each array of a message costs both ends a few
    microseconds (pickled, placed in the ring, rebuilt), so a batch of small tensors travels
    as a few arrays instead of one per request; a large one would only be copied once more."""
    if len(maps) < 2 or type(maps[0]) is not dict or not maps[0]:
        return maps
    keys = maps[0].keys()
    for tensors in maps:
        if type(tensors) is not dict or tensors.keys() != keys:
            return maps
    names = list(keys)
    arrays, rows = [], []
    for name in names:
        column = [tensors[name] for tensors in maps]
        first = column[0]
        if type(first) is not np.ndarray or first.dtype == object or first.ndim == 0:
            return maps
        for array in column:
            if type(array) is not np.ndarray or array.nbytes > _STACKED_BYTES:
                return maps
        try:  # NumPy checks that they share the dtype and the shape past the first axis
            arrays.append(np.concatenate(column, dtype=first.dtype, casting="no"))
        except (TypeError, ValueError):
            return maps
        rows.append([array.shape[0] for array in column])
    return names, arrays, rows


def unstack_rows(stacked: Any) -> list[dict[str, np.ndarray]]:
    """`stack_rows`' arrays back into one map per request, each array a view of its rows;
    ValueError when `stacked` is not what `stack_rows` makes (the server reads a worker's)."""
    if type(stacked) is not tuple or len(stacked) != 3:
        raise ValueError("stacked tensors are not (names, arrays, rows)")
    names, arrays, rows = stacked
    if not (type(names) is list and type(arrays) is list and type(rows) is list) or not (
        len(names) == len(arrays) == len(rows) > 0
    ):
        raise ValueError("stacked tensors' names, arrays and rows differ in number")
    count = len(rows[0]) if type(rows[0]) is list else -1
    maps: list[dict[str, np.ndarray]] = [{} for _ in range(max(count, 0))]
    for name, array, counts in zip(names, arrays, rows, strict=True):
        if (
            type(name) is not str
            or type(array) is not np.ndarray
            or array.ndim == 0
            or type(counts) is not list
            or len(counts) != count
        ):
            raise ValueError(f"stacked tensor '{name}' does not match its rows")
        start = 0
        for tensors, n in zip(maps, counts, strict=True):
            if type(n) is not int or n < 0:
                raise ValueError(f"stacked tensor '{name}' does not match its rows")
            tensors[name] = array[start : start + n]
            start += n
        if start != array.shape[0]:
            raise ValueError(f"stacked tensor '{name}' does not match its rows")
    return maps


class Pickler(pickle.Pickler):
    """Pickles a plain array as `plain_array`'s arguments and a BYTES tensor as
    `bytes_tensor`'s; anything else as pickle does."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is not np.ndarray:
            return NotImplemented
        dtype = obj.dtype
        if dtype.kind in _PLAIN_KINDS and obj.flags.c_contiguous:
            return plain_array, (pickle.PickleBuffer(obj.data), dtype.str, obj.shape)
        if dtype.kind != "O":  # not a BYTES tensor either
            return NotImplemented
        items = obj.ravel().tolist()
        try:
            data = b"".join(items)
        except TypeError:  # not all bytes: pickled as any object array
            return NotImplemented
        lengths = np.fromiter(map(len, items), dtype="<u8", count=len(items))
        return bytes_tensor, (
            obj.shape,
            pickle.PickleBuffer(lengths.data),
            pickle.PickleBuffer(data),
        )


class Unpickler(pickle.Unpickler):
    """Rebuilds a message; `allowed`: the only globals besides `plain_array` and `bytes_tensor` it
    may name (the server's, so that a model cannot run code in the server's process), or None
    for any."""

    def __init__(
        self,
        data: bytes | bytearray,
        buffers: Sequence[Any],
        allowed: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if name == "plain_array" and module in _MODULE_NAMES:
            return plain_array
        if name == "bytes_tensor" and module in _MODULE_NAMES:
            return bytes_tensor
        if self._allowed is not None and (module, name) not in self._allowed:
            raise pickle.UnpicklingError(f"the message names {module}.{name}")
        return super().find_class(module, name)
