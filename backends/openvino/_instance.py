"""`OpenVinoInstance`: a model compiled by OpenVINO for the CPU, with one infer request driven on
the instance's own worker thread (OpenVINO releases the GIL while it infers)."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.assemble import concat_inputs, request_rows, split_outputs
from backends.base import ExecutionResult, ModelSignature, Parameters, TensorMap, TensorSignature
from backends.device import Device, host_tensors
from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.in_process import InProcess
from backends.inline import InlineRule
from backends.instance_thread import InstanceThread
from backends.openvino._settings import OpenVinoSettings
from proto import model_config_pb2 as mc

INSTALL_HINT = "pip install 'convoy[openvino]'"
_CPU = Device.cpu()

# OpenVINO element type names -> config data types (the ones NumPy holds as they are).
_OV_TYPES: dict[str, int] = {
    "boolean": mc.TYPE_BOOL,
    "u8": mc.TYPE_UINT8,
    "u16": mc.TYPE_UINT16,
    "u32": mc.TYPE_UINT32,
    "u64": mc.TYPE_UINT64,
    "i8": mc.TYPE_INT8,
    "i16": mc.TYPE_INT16,
    "i32": mc.TYPE_INT32,
    "i64": mc.TYPE_INT64,
    "f16": mc.TYPE_FP16,
    "f32": mc.TYPE_FP32,
    "f64": mc.TYPE_FP64,
}


# OpenVINO's Python binding builds process-wide static state (its element-type -> NumPy dtype
# table, and pybind11's NumPy API under it) on first use, and two threads doing that first
# use at once deadlock: one holds the static's guard while it waits for the GIL, the other the
# GIL while it waits for the guard (models loading in parallel hung the server's start; two
# instances' first batches hung every request of their model). The first use is made here,
# one thread at a time: a thread waiting on this lock has let go of the GIL.
_FIRST_USE = threading.Lock()


def import_openvino() -> Any:
    """The openvino module with its binding's first NumPy use made; a load error naming the
    extra where it is missing."""
    with _FIRST_USE:
        try:
            ov = importlib.import_module("openvino")
        except ImportError as exc:
            raise ModelLoadError(
                f"the OpenVINO backend needs openvino, which cannot be imported ({exc}): "
                f"{INSTALL_HINT}"
            ) from exc
        ov.Type.f32.to_dtype()
    return ov


class OpenVinoInstance(InProcess):
    """One compiled copy of one model version and its infer request, on its own thread."""

    def __init__(
        self,
        name: str,
        compiled: Any,
        signature: ModelSignature,
        fixed_batch: int = 0,
        batch_padding: bool = False,
    ) -> None:
        self._name = name
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._signature = signature
        self._device = _CPU
        self._output_names = [t.name for t in signature.outputs]
        self._fixed_batch = fixed_batch  # > 0: compiled for exactly this batch size
        self._batch_padding = batch_padding  # a smaller batch is padded up to the fixed one
        self._worker = InstanceThread(name, InlineRule())

    @classmethod
    def load(cls, name: str, model_file: Path, config: mc.ModelConfig) -> OpenVinoInstance:
        """Read, reshape and compile the model for the CPU; blocking, so call it from a thread."""
        ov = import_openvino()
        settings = OpenVinoSettings.from_config(config)
        core = ov.Core()
        try:
            if settings.cpu_extension_path:
                core.add_extension(settings.cpu_extension_path)
            model = core.read_model(str(model_file))
        except Exception as exc:  # OpenVINO raises RuntimeError with its own text
            raise ModelLoadError(
                f"model '{config.name}': OpenVINO cannot read '{model_file}': {_first_line(exc)}"
            ) from exc
        fixed_batch = _reshape(ov, model, config, settings)
        signature = _signature(model, batch_padding=bool(fixed_batch))
        try:
            compiled = core.compile_model(model, "CPU", dict(settings.properties))
        except Exception as exc:
            raise ModelLoadError(
                f"model '{config.name}': OpenVINO cannot compile '{model_file}' for the CPU: "
                f"{_first_line(exc)}"
            ) from exc
        return cls(name, compiled, signature, fixed_batch, settings.batch_padding)

    def compiled_property(self, key: str) -> str:
        """A property of the compiled model as OpenVINO reports it, e.g. NUM_STREAMS."""
        return str(self._compiled.get_property(key))

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        # OpenVINO models take no request parameters and compute on the CPU.
        rows = request_rows(requests)
        return await self._worker.run(self._run, requests, rows, size=sum(rows))

    def close(self) -> None:
        self._worker.close()
        self._request = None
        self._compiled = None

    def _run(self, requests: Sequence[TensorMap], rows: Sequence[int]) -> ExecutionResult:
        try:
            start_ns = time.monotonic_ns()
            inputs = concat_inputs([host_tensors(request) for request in requests])
            total = len(next(iter(inputs.values())))
            if self._fixed_batch and total != self._fixed_batch:
                inputs = self._padded(inputs, total)
            fed_ns = time.monotonic_ns()
            results = self._request.infer(inputs)
            ran_ns = time.monotonic_ns()
            outputs = {name: np.asarray(results[name]) for name in self._output_names}
            if self._fixed_batch and total != self._fixed_batch:
                outputs = {name: array[:total] for name, array in outputs.items()}
            done_ns = time.monotonic_ns()
        except BackendError:
            raise
        except Exception as exc:
            raise ExecutionError(f"instance '{self._name}': OpenVINO: {_first_line(exc)}") from exc
        timings = (fed_ns - start_ns, ran_ns - fed_ns, done_ns - ran_ns)
        if len(requests) == 1:
            return ExecutionResult([outputs], *timings)
        return ExecutionResult(list(split_outputs(outputs, rows)), *timings)

    def _padded(self, inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        """A batch smaller than the fixed one, padded with zeros when ENABLE_BATCH_PADDING allows
        it (the outputs' padding rows are dropped); otherwise Triton's error."""
        if not self._batch_padding or rows > self._fixed_batch:
            raise ExecutionError(
                f"expected requests with batch size '{self._fixed_batch}', got '{rows}'... this "
                "error can be avoided by setting 'ENABLE_BATCH_PADDING' parameter in model "
                "configuration to 'YES' at a performance cost."
            )
        return {
            name: np.concatenate(
                [array, np.zeros((self._fixed_batch - rows, *array.shape[1:]), array.dtype)]
            )
            for name, array in inputs.items()
        }


def _reshape(ov: Any, model: Any, config: mc.ModelConfig, settings: OpenVinoSettings) -> int:
    """Give the model the shapes the config serves: with RESHAPE_IO_LAYERS the inputs take the
    config's dims (-1 dynamic); a batching model's first dimension becomes dynamic, or fixed at
    max_batch_size with SKIP_OV_DYNAMIC_BATCHSIZE. Returns that fixed batch (0: none)."""
    batching = config.max_batch_size > 0
    declared = {tensor.name: tensor for tensor in config.input}
    shapes: dict[str, Any] = {}
    for port in model.inputs:
        name = port.get_any_name()
        dims = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
        tensor = declared.get(name)
        if settings.reshape_io_layers and tensor is not None:
            wanted = list(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)
            if any(d < -1 or d == 0 for d in wanted):
                raise ModelLoadError(
                    f"model '{config.name}': openvino backend does not support dimensions "
                    "values other than `-1` or positive integers"
                )
            dims = ([dims[0]] if batching and dims else []) + wanted
        if batching and dims:
            dims[0] = config.max_batch_size if settings.skip_dynamic_batch else -1
        shapes[name] = ov.PartialShape(dims)
    try:
        model.reshape(shapes)
    except Exception as exc:
        raise ModelLoadError(
            f"model '{config.name}': OpenVINO cannot give the model the shapes "
            f"{ {n: str(s) for n, s in shapes.items()} }: {_first_line(exc)}"
        ) from exc
    return config.max_batch_size if batching and settings.skip_dynamic_batch else 0


def _signature(model: Any, batch_padding: bool) -> ModelSignature:
    """The model's tensors; with a fixed batch the first dimension is served as dynamic (a
    smaller batch is padded, or refused with Triton's error)."""
    tensors = [
        [_tensor(port, batch_padding) for port in ports] for ports in (model.inputs, model.outputs)
    ]
    return ModelSignature(inputs=tuple(tensors[0]), outputs=tuple(tensors[1]))


def _tensor(port: Any, dynamic_batch: bool = False) -> TensorSignature:
    name = port.get_any_name()
    kind = port.get_element_type().get_type_name()
    data_type = _OV_TYPES.get(kind)
    if data_type is None:
        raise ModelLoadError(f"tensor '{name}' has OpenVINO type {kind}, which is not supported")
    shape = [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
    if dynamic_batch and shape:
        shape[0] = -1
    return TensorSignature(name, data_type, tuple(shape))


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # OpenVINO's messages open with "Exception from src/...cpp:NN:" lines: keep what it says.
    said = [line for line in lines if not line.startswith("Exception from ")]
    return (said or lines or [repr(exc)])[0]
