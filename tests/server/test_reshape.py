"""Config reshapes: inputs to the model file's shape, outputs back to the config's dims."""

import numpy as np
import pytest

from server.contract.errors import ConfigError, InvalidInputError
from server.core.repository import parse_config
from server.core.serving.reshape import Reshape

CONFIG = parse_config(
    'name: "m" max_batch_size: 8 '
    'input [ { name: "x" data_type: TYPE_FP32 dims: [2, 2] reshape: { shape: [4] } },'
    ' { name: "plain" data_type: TYPE_FP32 dims: [3] } ] '
    'output [ { name: "y" data_type: TYPE_FP32 dims: [2, 2] reshape: { shape: [4] } } ]',
    "inline",
)


def test_inputs_take_the_files_shape_and_outputs_the_configs_dims_batch_axis_kept() -> None:
    reshape = Reshape.from_config(CONFIG)
    assert reshape is not None
    x, plain = np.arange(12, dtype=np.float32).reshape(3, 2, 2), np.zeros((3, 3), np.float32)
    model_side = reshape.to_model({"x": x, "plain": plain})
    assert model_side["x"].shape == (3, 4) and model_side["plain"] is plain
    back = reshape.to_config({"y": model_side["x"]})
    np.testing.assert_array_equal(back["y"], x)


def test_a_config_without_reshapes_needs_no_reshaping() -> None:
    assert Reshape.from_config(parse_config('name: "m" max_batch_size: 8', "inline")) is None


def test_shapes_that_do_not_fit_are_clear_errors() -> None:
    reshape = Reshape.from_config(CONFIG)
    assert reshape is not None
    with pytest.raises(InvalidInputError, match=r"cannot take the shape \[4\]"):
        reshape.to_model({"x": np.zeros((1, 3), np.float32)})
    with pytest.raises(ConfigError, match=r"does not fit its dims \[2, 2\]"):
        reshape.to_config({"y": np.zeros((1, 5), np.float32)})
