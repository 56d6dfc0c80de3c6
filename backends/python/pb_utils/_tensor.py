"""`Tensor`: a named host array, and how one comes from a DLPack producer or capsule."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import TritonModelException
from ._types import _DTYPE_TO_TRITON, numpy_to_triton_type


class Tensor:
    """A named array on the CPU (Convoy's python backend never hands out device memory)."""

    def __init__(self, name: str, numpy_array: npt.ArrayLike) -> None:
        array = np.asarray(numpy_array)
        triton_dtype = _DTYPE_TO_TRITON.get(array.dtype)
        if triton_dtype is not None:  # the common case: a native numeric, bool or object dtype
            self._name, self._array, self._triton_dtype = name, array, triton_dtype
            return
        if array.dtype.kind in "UV":
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} is not supported by the python "
                "backend; use np.object_ (items bytes or str) for string tensors"
            )
        triton_dtype = numpy_to_triton_type(array.dtype)
        if triton_dtype is None:
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} has no Triton data type"
            )
        self._name = name
        self._array = array
        self._triton_dtype = triton_dtype

    @staticmethod
    def from_dlpack(name: str, dlpack_object: Any) -> Tensor:
        """A tensor over a DLPack producer (anything with `__dlpack__`) or a DLPack capsule.

        Host memory is shared, not copied. A producer on a device (a CUDA tensor of PyTorch or
        CuPy) is asked for a host copy, as DLPack 1.0 lets a consumer ask: Convoy's python
        backend keeps a model's tensors in host memory."""
        if not hasattr(dlpack_object, "__dlpack__"):
            try:
                return Tensor(name, np.from_dlpack(_Capsule(dlpack_object)))
            except BufferError as exc:
                raise TritonModelException(
                    f"tensor '{name}': {exc}; a DLPack capsule of device memory cannot be copied "
                    "to host memory here: pass the tensor itself (it has __dlpack__), which is "
                    "asked for a host copy"
                ) from None
        device_type, device_id = dlpack_object.__dlpack_device__()
        if device_type == _KDLCPU:
            return Tensor(name, np.from_dlpack(dlpack_object))
        try:
            return Tensor(name, np.from_dlpack(dlpack_object, device="cpu", copy=True))
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise TritonModelException(
                f"tensor '{name}' is on DLPack device ({device_type}, {device_id}), and its "
                f"producer could not copy it to host memory ({exc}); Convoy's python backend "
                "keeps tensors in host memory: pass a host array (for example tensor.cpu())"
            ) from None

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        return self._array

    def triton_dtype(self) -> int:
        return self._triton_dtype

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self._array.__dlpack_device__()
        return device


_KDLCPU = 1  # DLPack's device type for host memory


class _Capsule:
    """Lets NumPy consume a bare DLPack capsule, which it only takes through `__dlpack__`."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCPU, 0)
