"""The PyTorch and OpenVINO backends' settings under Triton's parameter names: defaults, the
values each takes, and the refusals naming the model and the key."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from backends import ModelLoadError, OpenVinoSettings, TorchSettings
from proto import model_config_pb2 as mc


def _config(parameters: dict[str, str], groups: str = "") -> mc.ModelConfig:
    text = (
        'name: "m"\n'
        + groups
        + "".join(
            f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
            for k, v in parameters.items()
        )
    )
    return text_format.Parse(text, mc.ModelConfig())


def test_torch_defaults_follow_triton() -> None:
    settings = TorchSettings.from_config(_config({}))
    assert settings.inference_mode and settings.optimized_execution and settings.cudnn
    assert (settings.intra_op_threads, settings.inter_op_threads) == (0, 0)
    assert settings.jit_executor is None and settings.tensor_fuser is None


def test_torch_parameters() -> None:
    settings = TorchSettings.from_config(
        _config(
            {
                "INFERENCE_MODE": "false",
                "DISABLE_OPTIMIZED_EXECUTION": "true",
                "DISABLE_CUDNN": "1",
                "ENABLE_CACHE_CLEANING": "TRUE",
                "INTRA_OP_THREAD_COUNT": "2",
                "INTER_OP_THREAD_COUNT": "1",
                "ENABLE_JIT_PROFILING": "false",
            }
        )
    )
    assert not settings.inference_mode and not settings.optimized_execution
    assert not settings.cudnn and settings.cache_cleaning
    assert (settings.intra_op_threads, settings.inter_op_threads) == (2, 1)
    assert settings.jit_profiling is False and settings.jit_executor is None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("INFERENCE_MODE", "maybe", "model 'm': parameter 'INFERENCE_MODE' must be 0, 1"),
        ("INTRA_OP_THREAD_COUNT", "two", "parameter 'INTRA_OP_THREAD_COUNT' must be an integer"),
        ("INTER_OP_THREAD_COUNT", "-1", "parameter 'INTER_OP_THREAD_COUNT' must be >= 0"),
        ("INTRA_OP_THREAD_COUNT", "\u0662", "'INTRA_OP_THREAD_COUNT' must be an integer"),
    ],
)
def test_torch_refusals(key: str, value: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        TorchSettings.from_config(_config({key: value}))


def test_openvino_threads_share_the_cores_by_default() -> None:
    two = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    assert OpenVinoSettings.from_config(_config({}), cores=8).properties == {
        "INFERENCE_NUM_THREADS": "8"
    }
    shared = OpenVinoSettings.from_config(_config({}, two), cores=8)
    assert shared.properties["INFERENCE_NUM_THREADS"] == "4"
    assert OpenVinoSettings.from_config(_config({}, two), cores=1).properties == {
        "INFERENCE_NUM_THREADS": "1"
    }


def test_openvino_instances_short_of_the_cores_leave_their_threads_unpinned() -> None:
    """OpenVINO pins a compiled model's threads to the first cores: two one-thread instances
    pinned would share one core."""
    two = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    assert OpenVinoSettings.from_config(_config({}, two), cores=2).properties == {
        "INFERENCE_NUM_THREADS": "1",
        "ENABLE_CPU_PINNING": "NO",
    }
    narrow = OpenVinoSettings.from_config(_config({"INFERENCE_NUM_THREADS": "2"}), cores=8)
    assert narrow.properties["ENABLE_CPU_PINNING"] == "NO"
    for every_core in ({"INFERENCE_NUM_THREADS": "8"}, {"INFERENCE_NUM_THREADS": "0"}):
        assert (
            "ENABLE_CPU_PINNING"
            not in OpenVinoSettings.from_config(_config(every_core), cores=8).properties
        )
    asked = OpenVinoSettings.from_config(_config({"ENABLE_CPU_PINNING": "yes"}, two), cores=2)
    assert asked.properties["ENABLE_CPU_PINNING"] == "YES"


def test_openvino_parameters() -> None:
    settings = OpenVinoSettings.from_config(
        _config(
            {
                "NUM_STREAMS": "auto",
                "PERFORMANCE_HINT": "throughput",
                "INFERENCE_NUM_THREADS": "3",
                "COMPILATION_NUM_THREADS": "1",
                "HINT_BF16": "yes",
                "RESHAPE_IO_LAYERS": "YES",
                "SKIP_OV_DYNAMIC_BATCHSIZE": "no",
                "ENABLE_BATCH_PADDING": "yes",
            }
        ),
        cores=8,
    )
    assert settings.properties == {
        "INFERENCE_NUM_THREADS": "3",
        "COMPILATION_NUM_THREADS": "1",
        "ENABLE_CPU_PINNING": "NO",  # 3 of the 8 cores
        "NUM_STREAMS": "AUTO",
        "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_PRECISION_HINT": "bf16",
    }
    assert settings.reshape_io_layers and settings.batch_padding
    assert not settings.skip_dynamic_batch  # Triton's switches: only "yes" turns one on
    numbered = OpenVinoSettings.from_config(_config({"NUM_STREAMS": "4"}), cores=8)
    assert numbered.properties["NUM_STREAMS"] == "4"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("NUM_STREAMS", "many", "'NUM_STREAMS' to be either AUTO/NUMA/<int_value>, got many"),
        ("PERFORMANCE_HINT", "fast", "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast"),
        ("INFERENCE_NUM_THREADS", "-2", "'INFERENCE_NUM_THREADS' to be a non-negative number"),
        ("INFERENCE_NUM_THREADS", "\u0663", "to be a non-negative number, got \u0663"),
        ("NUM_STREAMS", "\u0662", "'NUM_STREAMS' to be either AUTO/NUMA/<int_value>"),
        ("HINT_BF16", "no", "'HINT_BF16' to be YES, got no"),
        ("INFERENCE_PRECISION_HINT", "f8", "'INFERENCE_PRECISION_HINT' to be f32, bf16 or f16"),
        ("ENABLE_CPU_PINNING", "off", "'ENABLE_CPU_PINNING' to be YES or NO, got off"),
    ],
)
def test_openvino_refusals(key: str, value: str, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        OpenVinoSettings.from_config(_config({key: value}), cores=2)
