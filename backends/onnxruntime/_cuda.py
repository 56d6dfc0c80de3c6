"""`CudaOrtInstance`: an ONNX Runtime CUDA session that computes on its instance's own stream.

A batch is assembled on the worker thread: host tensors are written into a pinned staging block
per input and copied to the device once; device tensors (CUDA shared memory, ensemble
intermediates) are concatenated by CuPy on the stream. Inputs and outputs are bound on the device
(IOBinding), and outputs come back to pinned host memory in one copy each, or stay on the device.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from backends.base import ModelSignature, TensorMap
from backends.device import (
    CUDA_PROVIDER,
    Device,
    GrowingBuffer,
    gather,
    import_cupy,
    is_device_array,
    new_stream,
    pinned_empty,
    preload_cuda_libraries,
)
from backends.errors import ModelLoadError
from backends.onnxruntime._accelerators import check_available, check_used
from backends.onnxruntime._instance import (
    NUMPY_TYPES,
    Batched,
    OrtInstance,
    bind_batch,
    read_onnx_signature,
)
from backends.onnxruntime._settings import OrtSettings


class CudaOrtInstance(OrtInstance):
    """One CUDA session of one model version, on device `device_id` and its own stream.

    String models keep OrtInstance's `run()` path on the CUDA session (ONNX Runtime cannot bind
    string tensors; it copies the others itself, as Triton's ORT backend keeps strings on CPU).
    A batch whose consumers read on a device (`device_outputs`) keeps its outputs there as CuPy
    arrays; any other batch's come back to pinned host memory.
    """

    def __init__(
        self,
        name: str,
        session: ort.InferenceSession,
        signature: ModelSignature,
        device_id: int,
        stream: Any,
    ) -> None:
        super().__init__(name, session, signature)
        self._cupy = import_cupy()
        self.device_id = device_id
        self._device = Device.cuda(device_id)
        self._stream = stream  # outlives the session, which computes on it
        cuda = self._cupy.cuda
        self._pinned = {t.name: GrowingBuffer(cuda.alloc_pinned_memory) for t in signature.inputs}
        self._on_device = {t.name: GrowingBuffer(cuda.alloc) for t in signature.inputs}

    @classmethod
    def open(
        cls,
        name: str,
        model_path: Path,
        settings: OrtSettings,
        device_id: int,
    ) -> CudaOrtInstance | None:
        """Open a CUDA session and warm CuPy's kernels; None when ONNX Runtime did not take the
        CUDA provider (it falls back to CPU silently, e.g. when cuDNN is missing). Blocking.
        A bad file, and a CUDA error on the way (out of memory, a failing device), is a
        ModelLoadError."""
        preload_cuda_libraries()
        instance = None
        try:
            stream = new_stream(device_id)
            options = {"device_id": str(device_id), "user_compute_stream": str(stream.ptr)}
            # TensorRT first where the accelerators ask for it, on the same device and stream.
            providers = settings.accelerators.gpu_providers((CUDA_PROVIDER, options))
            check_available(f"instance '{name}'", providers, ort.get_available_providers())
            session = ort.InferenceSession(
                str(model_path), sess_options=settings.session_options(), providers=providers
            )
            if CUDA_PROVIDER not in session.get_providers():
                return None
            check_used(f"instance '{name}'", providers, session.get_providers())
            instance = cls(name, session, read_onnx_signature(session), device_id, stream)
            instance._warm_up()
            return instance
        except ModelLoadError:
            raise
        except Exception as exc:  # ORT's own exception types, CuPy's CUDARuntimeError
            if instance is not None:
                instance.close()
            raise ModelLoadError(
                f"failed to load '{model_path}' on GPU {device_id}: {exc}"
            ) from exc

    @property
    def stream(self) -> Any:
        """The CuPy stream this instance computes on; device consumers of its outputs may wait
        on it. None once closed."""
        return self._stream

    def close(self) -> None:
        super().close()
        if self._stream is not None:
            del self._session  # before the stream it computes on
            self._stream = None
            self._pinned.clear()
            self._on_device.clear()

    def _warm_up(self) -> None:
        # CuPy compiles a kernel on its first use per dtype: do it at load, not on a request.
        cupy = self._cupy
        dtypes = {
            NUMPY_TYPES[arg.type] for arg in self._session.get_inputs() if arg.type in NUMPY_TYPES
        }
        with cupy.cuda.Device(self.device_id), self._stream:
            for dtype in dtypes:
                cupy.concatenate([cupy.zeros(1, dtype), cupy.zeros(1, dtype)])
            self._stream.synchronize()

    def _run_batch(
        self, requests: Sequence[TensorMap], start_ns: int, device_outputs: bool = False
    ) -> Batched:
        if self._uses_strings:
            return super()._run_batch(requests, start_ns)
        cupy = self._cupy
        with cupy.cuda.Device(self.device_id), self._stream:
            binding = self._session.io_binding()
            inputs = {
                name: self._assemble(name, [r[name] for r in requests]) for name in requests[0]
            }
            bind_batch(binding, inputs, self._output_names, self._device, self._bf16_inputs)
            bound_ns = time.monotonic_ns()
            self._session.run_with_iobinding(binding)
            ran_ns = time.monotonic_ns()
            values = binding.get_outputs()
            outputs = self._on_device_outputs(values) if device_outputs else self._copy_back(values)
            done_ns = time.monotonic_ns()
        return Batched(outputs, (bound_ns - start_ns, ran_ns - bound_ns, done_ns - ran_ns))

    def _assemble(self, name: str, arrays: list[Any]) -> Any:
        """One input of the batch on this device: host arrays through the pinned staging block and
        one copy; device arrays concatenated by CuPy on the stream (host ones uploaded first)."""
        cupy = self._cupy
        if not any(is_device_array(array) for array in arrays):
            nbytes = sum(array.nbytes for array in arrays)
            staged = gather(arrays, self._pinned[name].reserve(nbytes))
            memory = self._on_device[name].reserve(nbytes)
            if nbytes:
                memory.copy_from_host_async(staged.ctypes.data, nbytes, self._stream)
            return cupy.ndarray(staged.shape, staged.dtype, memory)
        parts = [self._here(array) for array in arrays]
        batch = parts[0] if len(parts) == 1 else cupy.concatenate(parts)
        return cupy.ascontiguousarray(batch)

    def _here(self, array: Any) -> Any:
        # On this device, in stream order: host arrays are uploaded, other GPUs' arrays copied
        # (whole: CUDA shared memory views and CuPy outputs are C-contiguous).
        cupy = self._cupy
        if not is_device_array(array):
            return cupy.asarray(array)
        if array.device.id == self.device_id:
            return array
        moved = cupy.empty(array.shape, array.dtype)
        moved.data.copy_from_device_async(array.data, array.nbytes, self._stream)
        return moved

    def _copy_back(self, values: list[ort.OrtValue]) -> dict[str, np.ndarray]:
        """Each output copied once into pinned host memory, then one wait for the stream."""
        runtime = self._cupy.cuda.runtime
        outputs = {}
        for name, value in zip(self._output_names, values, strict=True):
            host = pinned_empty(self._cupy, value.shape(), NUMPY_TYPES[value.data_type()])
            if host.nbytes:
                runtime.memcpyAsync(
                    host.ctypes.data,
                    value.data_ptr(),
                    host.nbytes,
                    runtime.memcpyDeviceToHost,
                    self._stream.ptr,
                )
            outputs[name] = host
        self._stream.synchronize()  # `values` stay referenced until the copies are done
        return outputs

    def _on_device_outputs(self, values: list[ort.OrtValue]) -> dict[str, Any]:
        """Outputs as CuPy arrays over ONNX Runtime's buffers, each keeping its OrtValue alive."""
        cuda = self._cupy.cuda
        outputs = {}
        for name, value in zip(self._output_names, values, strict=True):
            shape, dtype = tuple(value.shape()), NUMPY_TYPES[value.data_type()]
            nbytes = value.tensor_size_in_bytes()
            if nbytes == 0:
                outputs[name] = self._cupy.empty(shape, dtype)
                continue
            memory = cuda.UnownedMemory(value.data_ptr(), nbytes, value, self.device_id)
            outputs[name] = self._cupy.ndarray(shape, dtype, cuda.MemoryPointer(memory, 0))
        self._stream.synchronize()  # consumers may read them on other streams
        return outputs
