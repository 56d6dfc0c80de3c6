"""`TorchInstance` driven directly: batches assembled and split on its worker thread, BF16 as
uint16 bits, read-only request buffers, a dictionary input, the batch-row check, load errors,
and (where torch sees a GPU) a KIND_GPU instance on its own stream with host and device outputs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format

from backends import Device, ExecutionError, ModelLoadError, TorchInstance
from proto import model_config_pb2 as mc
from tests.extras import require_extra

torch = require_extra("torch", "pytorch")


class Scale(torch.nn.Module):  # type: ignore[misc]
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class DropRow(torch.nn.Module):  # type: ignore[misc]
    """Returns one row less than it was given: a batching model must not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[1:]


def _save(module: Any, path: Path) -> Path:
    torch.jit.script(module).save(str(path))
    return path


def _config(data_type: str, max_batch_size: int = 8) -> mc.ModelConfig:
    text = (
        f'name: "m" max_batch_size: {max_batch_size} '
        f'input [ {{ name: "x" data_type: {data_type} dims: [ 3 ] }} ] '
        f'output [ {{ name: "OUT__0" data_type: {data_type} dims: [ 3 ] }} ]'
    )
    return text_format.Parse(text, mc.ModelConfig())


def _run(instance: TorchInstance, *requests: dict[str, np.ndarray]) -> list[Any]:
    return asyncio.run(instance.execute(list(requests))).responses


def test_batches_are_split_per_request_and_read_only_inputs_are_safe(tmp_path: Path) -> None:
    instance = TorchInstance.load(
        "m_1_0", _save(Scale(), tmp_path / "m.pt"), _config("TYPE_FP32"), Device.cpu()
    )
    try:
        first = np.frombuffer(np.arange(3, dtype=np.float32).tobytes(), np.float32).reshape(1, 3)
        assert not first.flags.writeable  # as a request's tensor decoded from the wire
        second = np.ones((2, 3), np.float32)
        responses = _run(instance, {"x": first}, {"x": second})
        np.testing.assert_array_equal(responses[0]["OUT__0"], first * 2)
        np.testing.assert_array_equal(responses[1]["OUT__0"], second * 2)
        assert instance.signature.inputs[0].shape == (-1, 3)
    finally:
        instance.close()


def test_bf16_travels_as_uint16_bits(tmp_path: Path) -> None:
    instance = TorchInstance.load(
        "m_1_0", _save(Scale(), tmp_path / "m.pt"), _config("TYPE_BF16"), Device.cpu()
    )
    try:
        values = torch.tensor([[1.5, -2.0, 3.0]], dtype=torch.bfloat16)
        bits = values.view(torch.int16).numpy().view(np.uint16)
        out = _run(instance, {"x": bits})[0]["OUT__0"]
        assert out.dtype == np.uint16
        doubled = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
        assert doubled.tolist() == [[3.0, -4.0, 6.0]]
    finally:
        instance.close()


def test_a_batching_model_must_answer_every_row(tmp_path: Path) -> None:
    instance = TorchInstance.load(
        "m_1_0", _save(DropRow(), tmp_path / "m.pt"), _config("TYPE_FP32"), Device.cpu()
    )
    try:
        with pytest.raises(ExecutionError, match="has 1 rows, but the batch holds 2"):
            _run(instance, {"x": np.ones((2, 3), np.float32)})
    finally:
        instance.close()


def test_a_pickled_module_is_not_torchscript(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    torch.save(Scale(), path)
    with pytest.raises(ModelLoadError, match=r"is not a TorchScript file.*torch.jit.script"):
        TorchInstance.load("m_1_0", path, _config("TYPE_FP32"), Device.cpu())


def test_gpu_instance_on_its_own_stream(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    instance = TorchInstance.load(
        "m_1_0", _save(Scale(), tmp_path / "m.pt"), _config("TYPE_FP32"), Device.cuda(0)
    )
    try:
        assert instance.device == Device.cuda(0)
        assert instance.stream is not None and instance.stream != torch.cuda.default_stream(0)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        host = _run(instance, {"x": x})[0]["OUT__0"]
        np.testing.assert_array_equal(host, x * 2)
        result = asyncio.run(instance.execute([{"x": x}], device_outputs=True))
        on_device = result.responses[0]["OUT__0"]
        assert hasattr(on_device, "__cuda_array_interface__")
        np.testing.assert_array_equal(on_device.get(), x * 2)
    finally:
        instance.close()
