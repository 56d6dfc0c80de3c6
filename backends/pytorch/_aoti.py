"""`AotiInstance`: a PyTorch 2 AOTInductor package (`platform: "torch_aoti"`, `model.pt2`) run on
its own worker thread, within the limits of Triton's beta (pytorch_backend #179, #188).

The package's call spec (the pytree of its exported forward's arguments and results) says how the
config's tensors map onto the compiled program's flat inputs and outputs: a tensor inside a dict
goes by its key, a positional one by its `NAME__<index>` suffix or else by its place in the
config (as Triton's naming falls back to config order). Requests run one at a time, each as
exported (Triton's beta serves batch size 1: max_batch_size 0 or 1). The package is compiled for
one device (CPU or CUDA); it runs only on instances of that kind.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import ExecutionResult, Parameters, TensorMap
from backends.device import Device, host_tensors
from backends.errors import BackendError, ExecutionError, ModelLoadError
from backends.in_process import InProcess
from backends.instance_thread import InstanceThread
from backends.pytorch._instance import _config_signature, _from_numpy, _to_numpy
from backends.pytorch._runtime import TORCH_DTYPES, apply_process_settings, import_torch
from backends.pytorch._settings import TorchSettings
from proto import model_config_pb2 as mc

_TYPE_OF_DTYPE = {attribute: data_type for data_type, attribute in TORCH_DTYPES.items()}
_INDEXED = re.compile(r".+__(\d+)")


@dataclass(frozen=True, slots=True)
class AotiIO:
    """Which flat input of the package each config input feeds, and which flat output each
    config output reads."""

    inputs: tuple[tuple[str, int], ...]  # (config input, flat input index), in flat order
    outputs: tuple[tuple[str, int], ...]  # (config output, flat output index)


def plan_aoti_io(config: mc.ModelConfig, in_spec: str, out_spec: str) -> AotiIO:
    """Match the config's tensors to the package's flat inputs and outputs, given its call spec
    (the serialized pytrees `loader.get_call_spec()` answers); a load error naming what does not
    match."""
    torch = import_torch()
    return AotiIO(
        _match(config.name, "input", [t.name for t in config.input], _leaves(torch, in_spec)),
        _match(config.name, "output", [t.name for t in config.output], _leaves(torch, out_spec)),
    )


def _match(
    model: str, side: str, names: list[str], leaves: list[str | None]
) -> tuple[tuple[str, int], ...]:
    if len(names) != len(leaves):
        raise ModelLoadError(
            f"model '{model}': the config declares {len(names)} {side}s, but the torch_aoti "
            f"package has {len(leaves)}"
        )
    keyed = {key: index for index, key in enumerate(leaves) if key is not None}
    positional = [index for index, key in enumerate(leaves) if key is None]
    matched: dict[str, int] = {}
    for order, name in enumerate(names):
        indexed = _INDEXED.fullmatch(name)
        if name in keyed:
            matched[name] = keyed[name]
        elif indexed is not None and int(indexed.group(1)) < len(positional):
            matched[name] = positional[int(indexed.group(1))]
        elif not keyed and order < len(positional):
            matched[name] = positional[order]  # config order, as Triton's fallback
        else:
            raise ModelLoadError(
                f"model '{model}': {side} '{name}' is not in the torch_aoti package (its "
                f"{side}s: {', '.join(k for k in leaves if k is not None) or 'positional only'})"
            )
    if len(set(matched.values())) != len(matched):
        raise ModelLoadError(f"model '{model}': two config {side}s name the same package {side}")
    return tuple(sorted(matched.items(), key=lambda item: item[1]))


class AotiInstance(InProcess):
    """One loaded AOTInductor package of one model version; `execute` runs on its own thread."""

    def __init__(
        self, name: str, runner: Any, io: AotiIO, config: mc.ModelConfig, device: Device
    ) -> None:
        self._torch = import_torch()
        self._name = name
        self._runner = runner
        self._io = io
        self._device = device
        self._settings = TorchSettings.from_config(config)
        self._output_types = {t.name: t.data_type for t in config.output}
        self._signature = _config_signature(config)  # an Inductor package is not auto-completed
        torch = self._torch
        self._target = torch.device("cuda", device.id) if device.is_cuda else torch.device("cpu")
        self._worker = InstanceThread(name)

    @classmethod
    def load(
        cls, name: str, model_file: Path, config: mc.ModelConfig, device: Device
    ) -> AotiInstance:
        """Open the package for `device` and match it to the config; blocking."""
        if config.max_batch_size > 1:
            raise ModelLoadError(
                f"model '{config.name}': a torch_aoti model serves batch size 1 (Triton's beta "
                f"limit): max_batch_size must be 0 or 1, not {config.max_batch_size}"
            )
        if not config.input or not config.output:
            raise ModelLoadError(
                f"model '{config.name}': a torch_aoti model's config must declare its inputs "
                "and outputs (Inductor packages are not auto-completed)"
            )
        torch = import_torch()
        apply_process_settings(torch, config.name, TorchSettings.from_config(config))
        try:
            runner = torch._inductor.aoti_load_package(
                str(model_file), device_index=device.id if device.is_cuda else -1
            )
            compiled_for = runner.get_metadata().get("AOTI_DEVICE_KEY", "cpu")
            in_spec, out_spec = runner.loader.get_call_spec()
        except Exception as exc:  # torch raises RuntimeError, zipfile errors ...
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ModelLoadError(
                f"model '{config.name}': '{model_file}' is not an AOTInductor package "
                f"(torch._inductor.aoti_load_package: {first_line}); make it with "
                "torch._inductor.aoti_compile_and_package(torch.export.export(model, example))"
            ) from exc
        wanted = "cuda" if device.is_cuda else "cpu"
        if compiled_for != wanted:
            raise ModelLoadError(
                f"model '{config.name}': '{model_file}' was compiled for {compiled_for}, but "
                f"instance '{name}' runs on {wanted}; compile the package for that device"
            )
        io = plan_aoti_io(config, in_spec, out_spec)
        return cls(name, runner, io, config, device)

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        """Each request through the package on its own, in order; host outputs."""
        return await self._worker.run(self._run, requests)

    def close(self) -> None:
        self._worker.close()
        self._runner = None

    def _run(self, requests: Sequence[TensorMap]) -> ExecutionResult:
        torch = self._torch
        start_ns = time.monotonic_ns()
        responses: list[dict[str, np.ndarray] | BackendError] = []
        infer_ns = 0
        grad = torch.inference_mode() if self._settings.inference_mode else torch.no_grad()
        for request in requests:
            try:
                arrays = host_tensors(request)
                flat = [self._tensor(arrays[name]) for name, _ in self._io.inputs]
                run_ns = time.monotonic_ns()
                with grad:
                    results = self._runner.loader.run(flat)
                infer_ns += time.monotonic_ns() - run_ns
                responses.append(
                    {name: self._output(name, results[index]) for name, index in self._io.outputs}
                )
            except BackendError as exc:
                responses.append(exc)
            except Exception as exc:
                responses.append(
                    ExecutionError(f"instance '{self._name}': PyTorch execute failure: {exc}")
                )
        total_ns = time.monotonic_ns() - start_ns
        return ExecutionResult(responses, 0, infer_ns, total_ns - infer_ns)

    def _tensor(self, array: np.ndarray) -> Any:
        return _from_numpy(self._torch, array).to(self._target)

    def _output(self, name: str, tensor: Any) -> np.ndarray:
        data_type = _TYPE_OF_DTYPE.get(str(tensor.dtype).removeprefix("torch."))
        wanted = self._output_types[name]
        if data_type != wanted:
            provided = mc.DataType.Name(data_type) if data_type is not None else str(tensor.dtype)
            raise ExecutionError(
                f"configuration expects datatype {mc.DataType.Name(wanted)} for output "
                f"'{name}', model provides {provided}"
            )
        return _to_numpy(self._torch, tensor)


def _leaves(torch: Any, serialized_spec: str) -> list[str | None]:
    """Each flat leaf's dict key (the innermost one), None for a positional leaf."""
    pytree = torch.utils._pytree
    spec = pytree.treespec_loads(serialized_spec)
    keys: list[str | None] = [None] * spec.num_leaves

    def walk(node: Any, key: str | None) -> None:
        if isinstance(node, dict):
            for child_key, child in node.items():
                walk(child, str(child_key))
        elif isinstance(node, list | tuple):
            for child in node:
                walk(child, None)
        elif isinstance(node, int):
            keys[node] = key

    walk(pytree.tree_unflatten(list(range(spec.num_leaves)), spec), None)
    return keys
