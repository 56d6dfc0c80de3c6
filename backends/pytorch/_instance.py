"""`TorchInstance`: a TorchScript module driven on its own worker thread (and, on a GPU, its own
CUDA stream), fed and read by the naming conventions of Triton's PyTorch backend."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.assemble import concat_inputs, request_rows, split_outputs
from backends.base import ExecutionResult, ModelSignature, Parameters, TensorMap, TensorSignature
from backends.device import Device, host_tensors, import_cupy, is_device_array
from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.in_process import InProcess
from backends.inline import InlineRule
from backends.instance_thread import InstanceThread
from backends.pytorch._naming import ForwardArgument, TorchIO, named_index_only, plan_io
from backends.pytorch._runtime import (
    TORCH_DTYPES,
    apply_process_settings,
    import_torch,
    torch_dtype,
)
from backends.pytorch._settings import TorchSettings
from proto import model_config_pb2 as mc

_TYPE_OF_DTYPE = {attribute: data_type for data_type, attribute in TORCH_DTYPES.items()}


class TorchInstance(InProcess):
    """One loaded TorchScript module of one model version; `execute` runs on its own thread."""

    def __init__(
        self,
        name: str,
        module: Any,
        io: TorchIO,
        config: mc.ModelConfig,
        device: Device,
    ) -> None:
        self._torch = import_torch()
        self._name = name
        self._model = config.name
        self._module = module
        self._io = io
        self._settings = TorchSettings.from_config(config)
        self._device = device
        self._batching = config.max_batch_size > 0
        # The config's own tensors: a TorchScript file states no types or shapes to check.
        self._signature = _config_signature(config)
        self._output_types = {t.name: t.data_type for t in config.output}
        torch = self._torch
        self._target = torch.device("cuda", device.id) if device.is_cuda else torch.device("cpu")
        self._stream = torch.cuda.Stream(device=self._target) if device.is_cuda else None
        self._worker = InstanceThread(name, InlineRule())

    @classmethod
    def load(
        cls, name: str, model_file: Path, config: mc.ModelConfig, device: Device
    ) -> TorchInstance:
        """Open the module where `device` says and match it to the config; blocking."""
        torch = import_torch()
        apply_process_settings(torch, config.name, TorchSettings.from_config(config))
        location = torch.device("cuda", device.id) if device.is_cuda else torch.device("cpu")
        try:
            module = torch.jit.load(str(model_file), map_location=location)
        except Exception as exc:  # torch raises RuntimeError, ValueError, pickle errors ...
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ModelLoadError(
                f"model '{config.name}': '{model_file}' is not a TorchScript file "
                f"(torch.jit.load: {first_line}); save the model with "
                "torch.jit.script(model).save(path) or torch.jit.trace(model, example).save(path)"
            ) from exc
        io = _plan(config, _forward_arguments(config.name, module))
        for side, tensors in (("input", config.input), ("output", config.output)):
            for tensor in tensors:
                torch_dtype(torch, config.name, side, tensor.name, tensor.data_type)
        return cls(name, module, io, config, device)

    @property
    def stream(self) -> Any:
        """The torch CUDA stream this instance computes on; None on CPU."""
        return self._stream

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        # TorchScript models take no request parameters.
        rows = request_rows(requests)
        return await self._worker.run(self._run, requests, rows, device_outputs, size=sum(rows))

    def close(self) -> None:
        self._worker.close()
        self._module = None
        if self._device.is_cuda:
            self._torch.cuda.empty_cache()

    def _run(
        self, requests: Sequence[TensorMap], rows: Sequence[int], device_outputs: bool
    ) -> ExecutionResult:
        try:
            start_ns = time.monotonic_ns()
            with self._on_stream():
                inputs = self._inputs(requests)
                fed_ns = time.monotonic_ns()
                with self._modes():
                    result = self._forward(inputs)
                if self._stream is not None:
                    self._stream.synchronize()
                ran_ns = time.monotonic_ns()
                outputs = self._outputs(result, len(next(iter(inputs.values()))), device_outputs)
            if self._settings.cache_cleaning and self._device.is_cuda:
                self._torch.cuda.empty_cache()
            done_ns = time.monotonic_ns()
        except BackendError:
            raise
        except Exception as exc:
            raise ExecutionError(
                f"instance '{self._name}': PyTorch execute failure: {exc}"
            ) from exc
        timings = (fed_ns - start_ns, ran_ns - fed_ns, done_ns - ran_ns)
        if len(requests) == 1:
            return ExecutionResult([outputs], *timings)
        return ExecutionResult(list(split_outputs(outputs, rows)), *timings)

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        if self._stream is None:
            yield
            return
        with self._torch.cuda.device(self._target), self._torch.cuda.stream(self._stream):
            yield

    @contextlib.contextmanager
    def _modes(self) -> Iterator[None]:
        torch = self._torch
        grad = torch.inference_mode() if self._settings.inference_mode else torch.no_grad()
        with torch.jit.optimized_execution(self._settings.optimized_execution), grad:
            yield

    def _inputs(self, requests: Sequence[TensorMap]) -> dict[str, Any]:
        """The batch's inputs as tensors where the module computes."""
        torch = self._torch
        if self._stream is None:
            batch = concat_inputs([host_tensors(request) for request in requests])
            return {name: _from_numpy(torch, array) for name, array in batch.items()}
        names = requests[0].keys()
        parts = {name: [self._on_device(r[name]) for r in requests] for name in names}
        return {
            name: tensors[0] if len(tensors) == 1 else torch.cat(tensors)
            for name, tensors in parts.items()
        }

    def _on_device(self, array: Any) -> Any:
        torch = self._torch
        if is_device_array(array):
            return torch.as_tensor(array, device=self._target)
        return _from_numpy(torch, array).to(self._target, non_blocking=True)

    def _forward(self, inputs: dict[str, Any]) -> Any:
        if self._io.dict_input:
            return self._module(inputs)
        arguments: list[Any] = [None] * self._io.argument_count
        for name, position in self._io.input_positions.items():
            arguments[position] = inputs[name]
        return self._module(*arguments)

    def _outputs(self, result: Any, batch_size: int, device_outputs: bool) -> dict[str, Any]:
        """The config's outputs picked out of what forward returned, checked, then copied to the
        host (or kept on the device for a device consumer)."""
        torch = self._torch
        if isinstance(result, torch.Tensor):
            values = [result]
        elif isinstance(result, tuple) and all(isinstance(v, torch.Tensor) for v in result):
            values = list(result)
        else:
            raise ExecutionError(
                f"instance '{self._name}': PyTorch execute failure: output must be of type "
                "Tensor or Tuple of Tensors. It should not be a List / Dictionary of Tensors or "
                f"a Scalar (got {type(result).__name__})"
            )
        outputs: dict[str, Any] = {}
        for name, position in self._io.output_positions.items():
            if position >= len(values):
                raise ExecutionError(
                    f"The output {name} in the model configuration refers to an output index "
                    f"which doesn't exist. This model has {len(values)} outputs"
                )
            outputs[name] = self._checked(name, values[position], batch_size)
        if self._stream is not None and device_outputs:
            cupy = import_cupy()
            return {name: cupy.from_dlpack(tensor.contiguous()) for name, tensor in outputs.items()}
        return {name: _to_numpy(torch, tensor) for name, tensor in outputs.items()}

    def _checked(self, name: str, tensor: Any, batch_size: int) -> Any:
        data_type = _TYPE_OF_DTYPE.get(str(tensor.dtype).removeprefix("torch."))
        wanted = self._output_types.get(name)
        if wanted is not None and data_type != wanted:
            provided = mc.DataType.Name(data_type) if data_type is not None else str(tensor.dtype)
            raise ExecutionError(
                f"configuration expects datatype {mc.DataType.Name(wanted)} for output "
                f"'{name}', model provides {provided}"
            )
        if tensor.dim() == 0:
            raise ExecutionError(f"output '{name}' is a scalar which is not supported.")
        if self._batching and tensor.shape[0] != batch_size:
            raise ExecutionError(
                f"instance '{self._name}': output '{name}' has {tensor.shape[0]} rows, but the "
                f"batch holds {batch_size} (the first dimension of a batching model's outputs "
                "is the batch)"
            )
        return tensor


def _from_numpy(torch: Any, array: np.ndarray) -> Any:
    # torch shares the array's memory; a read-only request buffer is copied so the module may
    # not write into it (and torch does not warn). BF16 travels as uint16 bits.
    if not array.flags.writeable:
        array = array.copy()
    if array.dtype == np.uint16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _to_numpy(torch: Any, tensor: Any) -> np.ndarray:
    host = tensor.detach().to("cpu").contiguous()
    if host.dtype == torch.bfloat16:
        return host.view(torch.int16).numpy().view(np.uint16)  # type: ignore[no-any-return]
    return host.numpy()  # type: ignore[no-any-return]


def _forward_arguments(model: str, module: Any) -> list[ForwardArgument]:
    try:
        schema = module.forward.schema
    except Exception as exc:  # a module without forward
        raise ModelLoadError(f"model '{model}': the TorchScript module has no forward") from exc
    arguments = [ForwardArgument(a.name, str(a.type.kind()), str(a.type)) for a in schema.arguments]
    if arguments and arguments[0].kind == "ClassType":
        arguments = arguments[1:]  # self
    return arguments


def _plan(config: mc.ModelConfig, arguments: list[ForwardArgument]) -> TorchIO:
    sequence = config.sequence_batching
    controls = [control.name for control in sequence.control_input]
    state_inputs = [state.input_name for state in sequence.state]
    state_outputs = [state.output_name for state in sequence.state]
    named_index_only(config.name, controls, "input")
    named_index_only(config.name, [*state_inputs, *state_outputs], "state")
    inputs = [t.name for t in config.input] + controls + state_inputs
    outputs = [t.name for t in config.output]
    outputs += [name for name in state_outputs if name not in outputs]
    return plan_io(config.name, arguments, inputs, outputs)


def _config_signature(config: mc.ModelConfig) -> ModelSignature:
    batch = (-1,) if config.max_batch_size > 0 else ()

    def signature(tensor: mc.ModelInput | mc.ModelOutput) -> TensorSignature:
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        return TensorSignature(tensor.name, tensor.data_type, (*batch, *dims))

    return ModelSignature(
        inputs=tuple(signature(t) for t in config.input),
        outputs=tuple(signature(t) for t in config.output),
    )
