"""config.pbtxt parsing: Triton's text format into the compiled ModelConfig, clear errors."""

from pathlib import Path

import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import parse_config, read_config


def test_parses_a_triton_config() -> None:
    config = parse_config(
        """
        name: "resnet18"
        platform: "onnxruntime_onnx"
        max_batch_size: 32
        input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
        output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
        instance_group [ { count: 2 kind: KIND_CPU } ]
        dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 2000 }
        parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
        """,
        "inline",
    )
    assert config.max_batch_size == 32
    assert list(config.input[0].dims) == [3, 224, 224]
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.parameters["intra_op_thread_count"].string_value == "2"


def test_unknown_field_names_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m"\nmax_batch_sise: 8\n')
    with pytest.raises(ConfigError) as err:
        read_config(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "config.pbtxt") in message
    assert "line 2" in message
    assert "max_batch_sise" in message


def test_bad_enum_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="line 1"):
        parse_config('input [ { name: "x" data_type: TYPE_FLOAT32 } ]', "inline")


def test_missing_config_is_none(tmp_path: Path) -> None:
    assert read_config(tmp_path) is None
