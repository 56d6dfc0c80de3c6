"""`OrtInstance`: an ONNX Runtime session driven through IO binding on its own worker thread."""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from backends.assemble import concat_inputs, request_rows, split_outputs
from backends.base import (
    ExecutionResult,
    ModelSignature,
    Parameters,
    TensorMap,
    TensorSignature,
)
from backends.device import Device, host_tensors
from backends.errors import BackendError, ExecutionError, InvalidTensorError, ModelLoadError
from backends.in_process import InProcess
from backends.inline import InlineRule
from backends.instance_thread import InstanceThread
from backends.onnxruntime._accelerators import CPU_PROVIDER, check_available, check_used
from backends.onnxruntime._settings import OrtSettings, small_work
from proto import model_config_pb2 as mc

_log = logging.getLogger(__name__)

_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16; the onnx package is not a runtime dependency
_CPU = Device.cpu()
PROBE_RUNS = 5  # a load times this many batches of one (after one to warm up) and takes the fastest
PROBE_LARGE_US = 20_000  # a warm-up this long ends the probe: no later run would be small work

# ONNX Runtime's type strings -> config data types.
_ORT_TYPES: dict[str, int] = {
    "tensor(bool)": mc.TYPE_BOOL,
    "tensor(uint8)": mc.TYPE_UINT8,
    "tensor(uint16)": mc.TYPE_UINT16,
    "tensor(uint32)": mc.TYPE_UINT32,
    "tensor(uint64)": mc.TYPE_UINT64,
    "tensor(int8)": mc.TYPE_INT8,
    "tensor(int16)": mc.TYPE_INT16,
    "tensor(int32)": mc.TYPE_INT32,
    "tensor(int64)": mc.TYPE_INT64,
    "tensor(float16)": mc.TYPE_FP16,
    "tensor(float)": mc.TYPE_FP32,
    "tensor(double)": mc.TYPE_FP64,
    "tensor(string)": mc.TYPE_STRING,
    "tensor(bfloat16)": mc.TYPE_BF16,
}

# ONNX Runtime's type strings -> the NumPy dtype Convoy holds the values in.
NUMPY_TYPES: dict[str, np.dtype[Any]] = {
    "tensor(bool)": np.dtype(np.bool_),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(float)": np.dtype(np.float32),
    "tensor(double)": np.dtype(np.float64),
    "tensor(bfloat16)": np.dtype(np.uint16),
}


class OrtInstance(InProcess):
    """One session of one model version; `execute` runs on the instance's single worker thread."""

    def __init__(self, name: str, session: ort.InferenceSession, signature: ModelSignature):
        self._name = name
        self._session = session
        self._signature = signature
        self._device = _CPU  # a CUDA session's instance sets its own
        self._output_names = [t.name for t in signature.outputs]
        self._bf16_inputs = {t.name for t in signature.inputs if t.data_type == mc.TYPE_BF16}
        self._bf16_outputs = {t.name for t in signature.outputs if t.data_type == mc.TYPE_BF16}
        # ONNX Runtime binds only non-string tensors; string models go through run().
        self._uses_strings = any(
            t.data_type == mc.TYPE_STRING for t in (*signature.inputs, *signature.outputs)
        )
        # IO binding pays for itself on a device; on the CPU, run() costs half as much per
        # batch (20 against 41-52 us for mlp), so only BF16, which NumPy lacks, is bound.
        bf16 = self._bf16_inputs or self._bf16_outputs
        self._run_host = self._run_bound if bf16 and not self._uses_strings else self._run_plain
        self._worker = InstanceThread(name, InlineRule())

    @classmethod
    def load(cls, name: str, model_path: Path, settings: OrtSettings) -> OrtInstance:
        """Open a CPU session (with the OpenVINO provider when the config's accelerators ask
        for it); blocking, so call it from a thread."""
        providers = settings.accelerators.cpu_providers()
        check_available(f"instance '{name}'", providers, ort.get_available_providers())

        def open_session(single_thread: bool = False) -> ort.InferenceSession:
            try:
                return ort.InferenceSession(
                    str(model_path),
                    sess_options=settings.session_options(single_thread),
                    providers=providers,
                )
            except Exception as exc:  # ORT raises its own exception types for bad files
                raise ModelLoadError(f"failed to load '{model_path}': {exc}") from exc

        session = open_session()
        check_used(f"instance '{name}'", providers, session.get_providers())
        signature = read_onnx_signature(session)
        if settings.measure_pool and session.get_providers() == [CPU_PROVIDER]:
            fastest_us = fastest_run_us(session)
            if fastest_us is not None and small_work(fastest_us):
                _log.info(
                    "instance '%s' runs single-threaded: a batch of one takes %.0f us, less than "
                    "an intra-op pool costs",
                    name,
                    fastest_us,
                )
                session = open_session(single_thread=True)
        return cls(name, session, signature)

    @property
    def providers(self) -> list[str]:
        """The execution providers the session really runs with, in ONNX Runtime's order."""
        return list(self._session.get_providers())

    @property
    def intra_op_threads(self) -> int:
        """The session's intra-op threads (0: ONNX Runtime's own count)."""
        threads: int = self._session.get_session_options().intra_op_num_threads
        return threads

    @property
    def provider_options(self) -> dict[str, dict[str, str]]:
        """The execution providers the session really runs with, and their options."""
        return dict(self._session.get_provider_options())

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        # ONNX models take no request parameters.
        rows = request_rows(requests)
        return await self._worker.run(self._run, requests, rows, device_outputs, size=sum(rows))

    def close(self) -> None:
        self._worker.close()

    def _run(
        self, requests: Sequence[TensorMap], rows: Sequence[int], device_outputs: bool
    ) -> ExecutionResult:
        # Assembly runs here, on the instance's thread or inline (backends.inline).
        try:
            result = self._run_batch(requests, time.monotonic_ns(), device_outputs)
            if len(requests) == 1:
                return ExecutionResult([result.outputs], *result.timings)
            return ExecutionResult(list(split_outputs(result.outputs, rows)), *result.timings)
        except BackendError:
            raise
        except Exception as exc:
            raise ExecutionError(f"instance '{self._name}': {exc}") from exc

    def _run_batch(
        self, requests: Sequence[TensorMap], start_ns: int, device_outputs: bool = False
    ) -> Batched:
        """Assemble the batch and run it; device-origin inputs (CUDA shared memory, an ensemble's
        intermediates) come to the host first, since this session computes there, and so do its
        outputs whatever `device_outputs` says."""
        inputs = concat_inputs([host_tensors(request) for request in requests])
        return self._run_host(inputs, start_ns)

    def _run_bound(self, inputs: TensorMap, start_ns: int) -> Batched:
        binding = self._session.io_binding()
        contiguous = {name: np.ascontiguousarray(array) for name, array in inputs.items()}
        bind_batch(binding, contiguous, self._output_names, _CPU, self._bf16_inputs)
        bound_ns = time.monotonic_ns()
        self._session.run_with_iobinding(binding)
        ran_ns = time.monotonic_ns()
        outputs = {
            name: _bf16_bits(value) if name in self._bf16_outputs else value.numpy()
            for name, value in zip(self._output_names, binding.get_outputs(), strict=True)
        }
        done_ns = time.monotonic_ns()
        return Batched(outputs, (bound_ns - start_ns, ran_ns - bound_ns, done_ns - ran_ns))

    def _run_plain(self, inputs: TensorMap, start_ns: int) -> Batched:
        feed = prepare_inputs(inputs) if self._uses_strings else inputs
        fed_ns = time.monotonic_ns()
        values = self._session.run(self._output_names, feed)
        ran_ns = time.monotonic_ns()
        if self._uses_strings:  # ONNX Runtime answers strings as str objects: BYTES are bytes
            values = [
                _from_ort_strings(value) if value.dtype == object else value for value in values
            ]
        outputs = dict(zip(self._output_names, values, strict=True))
        done_ns = time.monotonic_ns()
        return Batched(outputs, (fed_ns - start_ns, ran_ns - fed_ns, done_ns - ran_ns))


@dataclass(frozen=True, slots=True)
class Batched:
    """One run over the assembled batch, before its outputs are split per request."""

    outputs: dict[str, np.ndarray]
    timings: tuple[int, int, int]  # input, infer and output ns


def bind_batch(
    binding: ort.IOBinding,
    inputs: Mapping[str, Any],
    output_names: Sequence[str],
    device: Device,
    bf16_inputs: Collection[str] = (),
) -> None:
    """Bind a batch's inputs by address where they live, and its outputs on `device`: C-contiguous
    NumPy arrays on the CPU, CuPy arrays on a CUDA device. The arrays must stay alive until the
    run is done; BF16 inputs are uint16 bits bound with the ONNX BFLOAT16 element type."""
    kind = device.kind.value
    for name, array in inputs.items():
        address = array.data.ptr if device.is_cuda else array.ctypes.data
        element_type = _ONNX_BFLOAT16 if name in bf16_inputs else array.dtype
        binding.bind_input(name, kind, device.id, element_type, list(array.shape), address)
    for name in output_names:
        binding.bind_output(name, kind, device.id)


def fastest_run_us(session: ort.InferenceSession) -> float | None:
    """The fastest of `PROBE_RUNS` runs of a batch of one made of zeros (a dynamic first
    dimension 1), in microseconds, after one to warm up; a warm-up over `PROBE_LARGE_US` is the
    answer by itself (large work). None, not measured, for a model
    that takes strings, refuses zeros, or has a dynamic dimension past the first: a size of 1
    there says nothing of the work its real inputs bring (an image's height and width, a
    sequence's length)."""
    inputs = {}
    for arg in session.get_inputs():
        dtype = NUMPY_TYPES.get(arg.type)
        if dtype is None or arg.type == "tensor(bfloat16)":
            return None
        shape = [dim if isinstance(dim, int) and dim > 0 else None for dim in arg.shape]
        if None in shape[1:]:
            return None
        inputs[arg.name] = np.zeros([1 if dim is None else dim for dim in shape], dtype)
    try:
        fastest_ns = _timed_ns(session, inputs)  # the warm-up, which tells large work alone
        if fastest_ns <= PROBE_LARGE_US * 1000:
            fastest_ns = min(_timed_ns(session, inputs) for _ in range(PROBE_RUNS))
    except Exception:  # a model zeros do not suit keeps its pool
        _log.debug("could not time a batch of zeros", exc_info=True)
        return None
    return fastest_ns / 1000


def _timed_ns(session: ort.InferenceSession, inputs: dict[str, np.ndarray]) -> int:
    start_ns = time.perf_counter_ns()
    session.run(None, inputs)
    return time.perf_counter_ns() - start_ns


def read_onnx_signature(session: ort.InferenceSession) -> ModelSignature:
    """The inputs and outputs a session declares, as config data types and -1 dynamic dims."""
    return ModelSignature(
        inputs=tuple(_tensor_signature(arg) for arg in session.get_inputs()),
        outputs=tuple(_tensor_signature(arg) for arg in session.get_outputs()),
    )


def _tensor_signature(arg: Any) -> TensorSignature:
    data_type = _ORT_TYPES.get(arg.type)
    if data_type is None:
        raise ModelLoadError(f"tensor '{arg.name}' has type {arg.type}, which is not supported")
    shape = tuple(dim if isinstance(dim, int) and dim >= 0 else -1 for dim in arg.shape)
    return TensorSignature(arg.name, data_type, shape)


def prepare_inputs(inputs: TensorMap) -> dict[str, np.ndarray]:
    """BYTES inputs as the text ONNX Runtime's Python binding needs; call it per request, so
    that one request's bad bytes fail only that request, before it joins a batch."""
    return {name: _to_ort_strings(name, array) for name, array in inputs.items()}


def _to_ort_strings(name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype != object:
        return array
    # The binding turns bytes into their repr, so hand it str; ORT strings must be UTF-8 then.
    try:
        text = [v.decode("utf-8") if isinstance(v, bytes) else v for v in array.flat]
    except UnicodeDecodeError as exc:
        raise InvalidTensorError(
            f"input '{name}' holds bytes that are not valid UTF-8 ({exc.reason} at byte "
            f"{exc.start}); the ONNX Runtime backend passes BYTES tensors as UTF-8 text"
        ) from exc
    return np.fromiter(text, dtype=object, count=len(text)).reshape(array.shape)


def _from_ort_strings(array: np.ndarray) -> np.ndarray:
    data = [s.encode("utf-8") for s in array.flat]
    return np.fromiter(data, dtype=object, count=len(data)).reshape(array.shape)


def _bf16_bits(value: ort.OrtValue) -> np.ndarray:
    # NumPy has no bfloat16: copy the raw bits out as uint16.
    raw = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
    return np.frombuffer(raw, dtype=np.uint16).reshape(value.shape()).copy()
