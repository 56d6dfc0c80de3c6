"""Loading instances at their placement: CPU fallbacks and refusals run everywhere; the CUDA data
path (IOBinding on the device, the instance's own stream, staging, device tensors) runs only
where a GPU, onnxruntime-gpu and CuPy are present (scripts/gpu_check.sh)."""

import asyncio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from backends import (
    CudaOrtInstance,
    Device,
    ModelLoadError,
    OrtInstance,
    OrtSettings,
    Placement,
    cuda_available,
    cuda_memory_total_bytes,
    device_memory,
    load_instance,
    plan_placements,
)
from backends.device import CUDA_PROVIDER
from proto import model_config_pb2 as mc
from scripts import models

CUDA = cuda_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a GPU, onnxruntime-gpu and CuPy")
without_cuda = pytest.mark.skipif(CUDA, reason="checks the behaviour without CUDA")


def _save(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _simple_inputs(rows: int, start: float = 0.0) -> dict[str, np.ndarray]:
    a = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) + start
    return {"INPUT0": a, "INPUT1": np.full((rows, 16), 2.0, np.float32)}


async def _outputs(
    instance: OrtInstance, requests: list[dict[str, Any]], device_outputs: bool = False
) -> list[dict[str, Any]]:
    result = await instance.execute(requests, device_outputs=device_outputs)
    for response in result.responses:
        assert isinstance(response, dict), response
    return [r for r in result.responses if isinstance(r, dict)]


def _auto_config() -> mc.ModelConfig:
    config = mc.ModelConfig(name="m")
    config.instance_group.add(name="maybe_gpu", kind=mc.ModelInstanceGroup.KIND_AUTO, count=1)
    return config


async def test_a_cpu_placement_loads_a_cpu_instance(tmp_path: Path) -> None:
    path = _save(tmp_path, models.simple())
    instance = load_instance("m_1_0", path, OrtSettings(), Placement("g", Device.cpu()))
    assert type(instance) is OrtInstance
    assert list(instance.provider_options) == ["CPUExecutionProvider"]
    (outputs,) = await _outputs(instance, [_simple_inputs(2)])
    np.testing.assert_array_equal(outputs["OUTPUT0"], _simple_inputs(2)["INPUT0"] + 2)
    instance.close()


@without_cuda
async def test_kind_auto_without_cuda_runs_on_cpu_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (placement,) = plan_placements(_auto_config(), 0)
    with caplog.at_level(logging.WARNING):
        instance = load_instance(
            "m_1_0", _save(tmp_path, models.simple()), OrtSettings(), placement
        )
    assert list(instance.provider_options) == ["CPUExecutionProvider"]
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "instance group 'maybe_gpu' is KIND_AUTO and runs on CPU" in warning
    assert "m_1_0" in warning
    (outputs,) = await _outputs(instance, [_simple_inputs(1)])
    np.testing.assert_array_equal(outputs["OUTPUT1"], _simple_inputs(1)["INPUT0"] - 2)
    instance.close()


@without_cuda
async def test_an_auto_gpu_placement_without_cuda_becomes_a_cpu_instance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    placement = Placement("maybe_gpu", Device.cuda(0), auto=True)
    with caplog.at_level(logging.WARNING):
        instance = load_instance(
            "m_1_0", _save(tmp_path, models.simple()), OrtSettings(), placement
        )
    assert type(instance) is OrtInstance
    assert "cannot run on GPU 0" in caplog.text and "runs on CPU" in caplog.text
    (outputs,) = await _outputs(instance, [_simple_inputs(3)])
    assert outputs["OUTPUT0"].shape == (3, 16)
    instance.close()


@without_cuda
def test_kind_gpu_without_cuda_is_refused_clearly(tmp_path: Path) -> None:
    placement = Placement("fast", Device.cuda(0))
    with pytest.raises(ModelLoadError) as error:
        load_instance("m_1_0", _save(tmp_path, models.simple()), OrtSettings(), placement)
    assert "instance 'm_1_0' of group 'fast' cannot run on GPU 0" in str(error.value)
    assert "pip install 'convoy[gpu]'" in str(error.value)


# ---- the CUDA data path: these run on a GPU machine only ----------------------------------------


def _gpu(tmp_path: Path, model: onnx.ModelProto) -> CudaOrtInstance:
    path = _save(tmp_path, model, f"model_{id(model)}.onnx")
    instance = load_instance("gpu_0", path, OrtSettings(), Placement("g", Device.cuda(0)))
    assert isinstance(instance, CudaOrtInstance)
    assert instance.device == Device.cuda(0)
    return instance


@needs_cuda
async def test_a_gpu_instance_binds_on_the_device_on_its_own_stream(tmp_path: Path) -> None:
    instance = _gpu(tmp_path, models.simple())
    options = instance.provider_options[CUDA_PROVIDER]
    assert options["device_id"] == "0"
    assert options["user_compute_stream"] == str(instance.stream.ptr)
    assert instance.stream.ptr != 0  # not the legacy default stream
    cpu = OrtInstance.load("cpu_0", _save(tmp_path, models.simple()), OrtSettings())
    requests = [_simple_inputs(rows, start=rows) for rows in (1, 3, 2)]
    for _ in range(3):  # the staging blocks are reused from batch to batch
        on_gpu, on_cpu = await _outputs(instance, requests), await _outputs(cpu, requests)
        for gpu_response, cpu_response in zip(on_gpu, on_cpu, strict=True):
            for name in ("OUTPUT0", "OUTPUT1"):
                assert isinstance(gpu_response[name], np.ndarray)
                np.testing.assert_array_equal(gpu_response[name], cpu_response[name])
    instance.close()
    cpu.close()


@needs_cuda
async def test_two_gpu_instances_compute_on_separate_streams(tmp_path: Path) -> None:
    first, second = _gpu(tmp_path, models.simple()), _gpu(tmp_path, models.simple())
    assert first.stream.ptr != second.stream.ptr
    batches = [[_simple_inputs(4, start=float(i))] for i in range(8)]
    results = await asyncio.gather(
        *(_outputs(first if i % 2 else second, batch) for i, batch in enumerate(batches))
    )
    for batch, (outputs,) in zip(batches, results, strict=True):
        np.testing.assert_array_equal(outputs["OUTPUT0"], batch[0]["INPUT0"] + 2)
    first.close()
    second.close()


@needs_cuda
async def test_device_inputs_join_host_ones_and_outputs_can_stay_on_the_device(
    tmp_path: Path,
) -> None:
    import cupy

    instance = _gpu(tmp_path, models.simple())
    host = _simple_inputs(2)
    device = {name: cupy.asarray(array) for name, array in _simple_inputs(3, 10).items()}
    first, second = await _outputs(instance, [host, device], device_outputs=True)
    assert isinstance(first["OUTPUT0"], cupy.ndarray)
    np.testing.assert_array_equal(first["OUTPUT0"].get(), host["INPUT0"] + 2)
    np.testing.assert_array_equal(second["OUTPUT1"].get(), _simple_inputs(3, 10)["INPUT0"] - 2)
    # The same instance answers the next batch on the host when its consumer reads there.
    (back,) = await _outputs(instance, [device])
    assert isinstance(back["OUTPUT0"], np.ndarray)
    np.testing.assert_array_equal(back["OUTPUT0"], _simple_inputs(3, 10)["INPUT0"] + 2)
    instance.close()
    cpu = OrtInstance.load("cpu_0", _save(tmp_path, models.simple()), OrtSettings())
    assert cpu.device == Device.cpu()
    # A CPU model given device inputs copies them; asked for device outputs it still answers
    # on the host, where it computes.
    (on_cpu,) = await _outputs(cpu, [device], device_outputs=True)
    assert isinstance(on_cpu["OUTPUT0"], np.ndarray)
    np.testing.assert_array_equal(on_cpu["OUTPUT0"], _simple_inputs(3, 10)["INPUT0"] + 2)
    cpu.close()


@needs_cuda
async def test_bf16_bits_and_strings_on_a_gpu_instance(tmp_path: Path) -> None:
    bf16 = _gpu(tmp_path, models.identity(TensorProto.BFLOAT16))
    bits = np.array([[0x3F80, 0xC000, 0x0000, 0x7F80]], np.uint16)
    (outputs,) = await _outputs(bf16, [{bf16.signature.inputs[0].name: bits}])
    np.testing.assert_array_equal(next(iter(outputs.values())), bits)
    bf16.close()
    strings = _gpu(tmp_path, models.bytes_identity())  # the run() path, on the CUDA session
    items = np.array([[b"a", "é".encode()]], dtype=object)
    (outputs,) = await _outputs(strings, [{strings.signature.inputs[0].name: items}])
    assert next(iter(outputs.values())).tolist() == items.tolist()
    strings.close()


@needs_cuda
async def test_resnet18_on_the_gpu_matches_the_cpu(tmp_path: Path) -> None:
    model = models.resnet18()
    gpu = _gpu(tmp_path, model)
    cpu = OrtInstance.load("cpu_0", _save(tmp_path, model), OrtSettings())
    rng = np.random.default_rng(0)
    requests = [{"input": rng.random((n, 3, 224, 224), dtype=np.float32)} for n in (1, 4)]
    for on_gpu, on_cpu in zip(
        await _outputs(gpu, requests), await _outputs(cpu, requests), strict=True
    ):
        np.testing.assert_allclose(on_gpu["output"], on_cpu["output"], rtol=1e-3, atol=1e-3)
    gpu.close()
    cpu.close()


@needs_cuda
def test_device_memory_is_read_from_the_device() -> None:
    free, total = device_memory(0)
    assert 0 < free <= total
    assert cuda_memory_total_bytes() >= total
