"""Auto-complete from the model file's signature, and checks of a config against the file."""

import pytest

from backends import ModelSignature, TensorSignature
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import (
    AutoComplete,
    autocomplete,
    check_backend,
    check_signature,
    fill_identity,
    parse_config,
)

BATCHING = ModelSignature(
    inputs=(TensorSignature("x", mc.TYPE_FP32, (-1, 16)),),
    outputs=(TensorSignature("y", mc.TYPE_INT64, (-1, 2)),),
)
FIXED = ModelSignature(
    inputs=(TensorSignature("x", mc.TYPE_FP32, (4, 16)),),
    outputs=(TensorSignature("y", mc.TYPE_FP32, (4,)),),
)


def test_identity_fills_name_backend_platform_file_and_policy() -> None:
    config = fill_identity(mc.ModelConfig(), "m")
    assert config.name == "m"
    assert (config.backend, config.platform) == ("onnxruntime", "onnxruntime_onnx")
    assert config.default_model_filename == "model.onnx"
    assert config.version_policy.latest.num_versions == 1


def test_identity_completes_backend_from_platform() -> None:
    config = fill_identity(parse_config('platform: "onnxruntime_onnx"', "inline"), "m")
    assert config.backend == "onnxruntime"


def test_name_must_match_directory() -> None:
    with pytest.raises(ConfigError, match="does not match"):
        fill_identity(parse_config('name: "other"', "inline"), "m")


def test_dynamic_first_dimension_gives_default_max_batch_size() -> None:
    config = autocomplete(fill_identity(mc.ModelConfig(), "m"), BATCHING)
    assert config.max_batch_size == 4
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", mc.TYPE_FP32, [16])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("y", mc.TYPE_INT64, [2])
    ]
    assert config.HasField("dynamic_batching")
    assert [(g.kind, g.count, g.name) for g in config.instance_group] == [
        (mc.ModelInstanceGroup.KIND_CPU, 1, "m_0")
    ]


def test_fixed_shapes_give_max_batch_size_zero_and_full_dims() -> None:
    config = autocomplete(fill_identity(mc.ModelConfig(), "m"), FIXED)
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [4, 16]
    assert not config.HasField("dynamic_batching")


def test_declared_tensors_and_batch_size_are_kept() -> None:
    declared = parse_config(
        'max_batch_size: 2 input [ { name: "x" data_type: TYPE_FP32 dims: [16] } ]', "inline"
    )
    config = autocomplete(fill_identity(declared, "m"), BATCHING)
    assert config.max_batch_size == 2
    assert len(config.input) == 1
    assert [t.name for t in config.output] == ["y"]  # the missing side is completed
    assert not config.HasField("dynamic_batching")


def test_cpu_group_without_count_gets_two_instances() -> None:
    config = autocomplete(
        fill_identity(parse_config("instance_group [ { kind: KIND_CPU } ]", "inline"), "m"),
        BATCHING,
    )
    assert config.instance_group[0].count == 2


def test_signature_check_accepts_a_matching_config() -> None:
    check_signature(autocomplete(fill_identity(mc.ModelConfig(), "m"), BATCHING), BATCHING)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('max_batch_size: 4 input [ { name: "z" data_type: TYPE_FP32 dims: [16] } ]', "'z'"),
        (
            'max_batch_size: 4 input [ { name: "x" data_type: TYPE_INT32 dims: [16] } ]',
            "TYPE_INT32",
        ),
        ('max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [15] } ]', "dims [15]"),
        ('max_batch_size: 0 input [ { name: "x" data_type: TYPE_FP32 dims: [16] } ]', "expects"),
        (
            'max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [16] '
            "reshape: { shape: [4, 4] } } ]",
            "expects [16]",  # the file's shape is compared with the reshape
        ),
        (
            'max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [15] '
            "reshape: { shape: [16] } } ]",
            "but reshape [16]",
        ),
    ],
)
def test_signature_mismatches_are_config_errors(text: str, expected: str) -> None:
    config = autocomplete(fill_identity(parse_config(text, "inline"), "m"), BATCHING)
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        check_signature(config, BATCHING)


def test_batching_needs_a_dynamic_first_dimension() -> None:
    config = autocomplete(fill_identity(parse_config("max_batch_size: 8", "inline"), "m"), FIXED)
    with pytest.raises(ConfigError, match="no dynamic batch dimension"):
        check_signature(config, FIXED)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('backend: "tensorflow"', "backend 'tensorflow' is not supported"),
        (
            'backend: "python" sequence_batching { state [ { input_name: "S" '
            'output_name: "S_OUT" data_type: TYPE_FP32 dims: [1] } ] } '
            "model_transaction_policy { decoupled: true }",
            "a decoupled model cannot keep implicit state",
        ),
        (
            'backend: "python" sequence_batching { iterative_sequence: true state [ { '
            'input_name: "S" output_name: "S_OUT" data_type: TYPE_FP32 dims: [1] } ] }',
            "an iterative sequence cannot keep implicit state",
        ),
        ('platform: "tensorrt_plan"', "backend 'tensorrt_plan' is not supported"),
        (
            'backend: "openvino" instance_group [ { kind: KIND_GPU } ]',
            "openVINO backend supports only CPU device",
        ),
    ],
)
def test_unsupported_backends_and_devices(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        check_backend(fill_identity(parse_config(text, "inline"), "m"))


def test_disabled_auto_complete_fills_nothing_from_the_file() -> None:
    config = autocomplete(
        fill_identity(mc.ModelConfig(), "m"), BATCHING, AutoComplete(enabled=False)
    )
    assert not config.input and not config.output and config.max_batch_size == 0
    assert config.instance_group[0].count == 1  # groups are still normalized
    with pytest.raises(ConfigError, match="which the config does not declare"):
        check_signature(config, BATCHING)


def test_the_default_max_batch_size_is_a_setting() -> None:
    settings = AutoComplete(default_max_batch_size=16)
    config = autocomplete(fill_identity(mc.ModelConfig(), "m"), BATCHING, settings)
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
