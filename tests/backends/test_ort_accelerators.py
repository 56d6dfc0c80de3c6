"""Execution accelerators as ONNX Runtime providers, read as Triton's ONNX Runtime backend reads
them, and the refusals: an unknown accelerator or option, and a provider this ONNX Runtime lacks
(the CPU build here has neither TensorRT nor OpenVINO)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format

from backends import ModelLoadError, OrtInstance, OrtSettings
from backends.onnxruntime._accelerators import (
    CPU_PROVIDER,
    OPENVINO_PROVIDER,
    TENSORRT_PROVIDER,
    Accelerators,
    check_available,
    check_used,
)
from proto import model_config_pb2 as mc
from scripts import models

CUDA = ("CUDAExecutionProvider", {"device_id": "1", "user_compute_stream": "4096"})


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m"\n{text}', mc.ModelConfig())


def _gpu(parameters: str, name: str = "tensorrt") -> mc.ModelConfig:
    return _config(
        "optimization { execution_accelerators { gpu_execution_accelerator [ "
        f'{{ name: "{name}" {parameters} }} ] }} }}'
    )


def test_tensorrt_options_as_triton_maps_them() -> None:
    accelerators = Accelerators.from_config(
        _gpu(
            'parameters { key: "precision_mode" value: "FP16" } '
            'parameters { key: "max_workspace_size_bytes" value: "1073741824" } '
            'parameters { key: "trt_engine_cache_enable" value: "true" } '
            'parameters { key: "trt_engine_cache_path" value: "/cache/trt" } '
            'parameters { key: "trt_builder_optimization_level" value: "3" }'
        )
    )
    assert accelerators.tensorrt == {
        "trt_fp16_enable": "1",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache/trt",
        "trt_builder_optimization_level": "3",
    }
    providers = accelerators.gpu_providers(CUDA)
    assert [name for name, _ in providers] == [TENSORRT_PROVIDER, CUDA[0], CPU_PROVIDER]
    trt = providers[0][1]
    # TensorRT runs on the instance's own device and CUDA stream, as the CUDA provider does.
    assert (trt["device_id"], trt["user_compute_stream"], trt["has_user_compute_stream"]) == (
        "1",
        "4096",
        "1",
    )


@pytest.mark.parametrize(
    ("mode", "option"),
    [("FP16", "trt_fp16_enable"), ("BF16", "trt_bf16_enable"), ("INT8", "trt_int8_enable")],
)
def test_precision_modes(mode: str, option: str) -> None:
    parameters = f'parameters {{ key: "precision_mode" value: "{mode}" }}'
    assert Accelerators.from_config(_gpu(parameters)).tensorrt == {option: "1"}


def test_fp32_is_tensorrt_default_and_cuda_options_join_the_cuda_provider() -> None:
    config = _config(
        "optimization { execution_accelerators { gpu_execution_accelerator [ "
        '{ name: "tensorrt" parameters { key: "precision_mode" value: "FP32" } }, '
        '{ name: "cuda" parameters { key: "cudnn_conv_algo_search" value: "HEURISTIC" } } ] } }'
    )
    accelerators = Accelerators.from_config(config)
    assert accelerators.tensorrt == {}
    cuda = accelerators.gpu_providers(CUDA)[1]
    assert cuda == (CUDA[0], {"cudnn_conv_algo_search": "HEURISTIC", **CUDA[1]})


def test_openvino_on_cpu_instances_only() -> None:
    config = _config(
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" '
        "} ] } }"
    )
    accelerators = Accelerators.from_config(config)
    assert accelerators.cpu_providers() == [
        (OPENVINO_PROVIDER, {"device_type": "CPU"}),
        (CPU_PROVIDER, {}),
    ]
    assert not accelerators.asks_for_gpu
    assert Accelerators().cpu_providers() == [(CPU_PROVIDER, {})]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_gpu("", name="tpu"), "unknown Execution Accelerator 'tpu' is requested"),
        (
            _config(
                "optimization { execution_accelerators { cpu_execution_accelerator [ "
                '{ name: "tensorrt" } ] } }'
            ),
            "unknown Execution Accelerator 'tensorrt' is requested",
        ),
        (
            _gpu('parameters { key: "precision_mode" value: "FP8" }'),
            "unsupported precision mode 'FP8' is requested",
        ),
        (
            _gpu('parameters { key: "workspace" value: "1" }'),
            "unknown parameter 'workspace' is provided for TensorRT Execution Accelerator",
        ),
        (
            _gpu('parameters { key: "max_workspace_size_bytes" value: "1GB" }'),
            "TensorRT parameter 'max_workspace_size_bytes' must be an integer, got '1GB'",
        ),
        (
            _gpu('parameters { key: "trt_engine_cache_enable" value: "yes" }'),
            "TensorRT parameter 'trt_engine_cache_enable' must be 0, 1, false or true",
        ),
    ],
)
def test_refusals(config: mc.ModelConfig, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        Accelerators.from_config(config)


def test_a_missing_provider_names_its_package() -> None:
    providers = [(TENSORRT_PROVIDER, {}), ("CUDAExecutionProvider", {})]
    with pytest.raises(ModelLoadError, match=r"tensorrt-cu13"):
        check_available("instance 'm_1_0'", providers, ["CPUExecutionProvider"])
    check_available("instance 'm_1_0'", providers, [TENSORRT_PROVIDER])
    with pytest.raises(ModelLoadError, match="made the session without TensorrtExecution"):
        check_used("instance 'm_1_0'", providers, ["CUDAExecutionProvider"])


def test_openvino_provider_missing_from_this_onnxruntime_is_a_load_error(tmp_path: Path) -> None:
    assert OPENVINO_PROVIDER not in ort.get_available_providers()
    path = tmp_path / "model.onnx"
    onnx.save_model(models.simple(), path)
    config = _config(
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" '
        "} ] } }"
    )
    with pytest.raises(ModelLoadError, match=r"onnxruntime-openvino") as refused:
        OrtInstance.load("m_1_0", path, OrtSettings.from_config(config, cores=2))
    assert "instance 'm_1_0'" in str(refused.value)
    plain = OrtInstance.load("m_1_0", path, OrtSettings.from_config(_config(""), cores=2))
    try:
        assert plain.providers == [CPU_PROVIDER]
    finally:
        plain.close()
