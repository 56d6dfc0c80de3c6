"""ONNX Runtime instances on CPU: the IO binding path, BF16 bits, string tensors."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from backends import InvalidTensorError, ModelLoadError, OrtInstance, OrtSettings
from proto import model_config_pb2 as mc
from scripts import models


def _save(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


async def test_io_binding_computes_and_reports_timings(tmp_path: Path) -> None:
    instance = OrtInstance.load("simple_0", _save(tmp_path, models.simple()), OrtSettings())
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), np.float32)
    result = await instance.execute([{"INPUT0": a, "INPUT1": b}])
    (outputs,) = result.responses
    assert isinstance(outputs, dict)
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
    assert result.compute_infer_ns > 0
    assert [t.name for t in instance.signature.inputs] == ["INPUT0", "INPUT1"]
    assert instance.signature.inputs[0].shape == (-1, 16)
    assert instance.signature.inputs[0].data_type == mc.TYPE_FP32
    instance.close()


async def test_a_batch_is_assembled_and_split_back_per_request(tmp_path: Path) -> None:
    instance = OrtInstance.load("simple_0", _save(tmp_path, models.simple()), OrtSettings())
    requests = [
        {
            "INPUT0": np.full((rows, 16), float(rows), np.float32),
            "INPUT1": np.ones((rows, 16), np.float32),
        }
        for rows in (1, 3, 2)
    ]
    result = await instance.execute(requests)
    assert len(result.responses) == 3
    for rows, response in zip((1, 3, 2), result.responses, strict=True):
        assert isinstance(response, dict)
        np.testing.assert_array_equal(response["OUTPUT0"], np.full((rows, 16), rows + 1.0))
    instance.close()


async def test_bf16_travels_as_uint16_bits(tmp_path: Path) -> None:
    model = models.identity(TensorProto.BFLOAT16)
    instance = OrtInstance.load("bf16_0", _save(tmp_path, model), OrtSettings())
    assert instance.signature.inputs[0].data_type == mc.TYPE_BF16
    bits = np.array([[0x3F80, 0xC000, 0x0000, 0x7F80]], np.uint16)
    result = await instance.execute([{instance.signature.inputs[0].name: bits}])
    (outputs,) = result.responses
    assert isinstance(outputs, dict)
    (output,) = outputs.values()
    np.testing.assert_array_equal(output, bits)
    instance.close()


async def test_strings_are_utf8_bytes_in_and_out(tmp_path: Path) -> None:
    instance = OrtInstance.load("bytes_0", _save(tmp_path, models.bytes_identity()), OrtSettings())
    name = instance.signature.inputs[0].name
    items = np.array([[b"", "é".encode(), b"a\x00b"]], dtype=object)
    result = await instance.execute([{name: items}])
    (outputs,) = result.responses
    assert isinstance(outputs, dict)
    (output,) = outputs.values()
    assert output.tolist() == items.tolist()
    with pytest.raises(InvalidTensorError, match="not valid UTF-8"):
        await instance.execute([{name: np.array([[b"\xff"]], dtype=object)}])
    instance.close()


def test_garbage_file_is_a_load_error(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not an onnx model")
    with pytest.raises(ModelLoadError, match="failed to load"):
        OrtInstance.load("bad_0", path, OrtSettings())


def test_a_pool_nobody_asked_for_is_dropped_for_small_work(tmp_path: Path) -> None:
    path = _save(tmp_path, models.mlp())  # a batch of one takes tens of microseconds
    measured = OrtInstance.load("mlp_0", path, OrtSettings(intra_op_threads=2, measure_pool=True))
    assert measured.intra_op_threads == 1
    asked = OrtInstance.load("mlp_1", path, OrtSettings(intra_op_threads=2))
    assert asked.intra_op_threads == 2  # a count the config names is kept


def test_a_model_zeros_cannot_time_keeps_its_pool(tmp_path: Path) -> None:
    path = _save(tmp_path, models.bytes_identity())
    instance = OrtInstance.load("b_0", path, OrtSettings(intra_op_threads=2, measure_pool=True))
    assert instance.intra_op_threads == 2


def test_a_dynamic_dimension_past_the_batch_keeps_the_pool(tmp_path: Path) -> None:
    # A batch of one 1 x 1 image, or a sequence of length 1, says nothing of the real work.
    nodes = [onnx.helper.make_node("Relu", ["X"], ["Y"])]
    shape: list[str | int | None] = ["batch", None]
    graph = onnx.helper.make_graph(
        nodes,
        "ragged",
        [onnx.helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [onnx.helper.make_tensor_value_info("Y", TensorProto.FLOAT, shape)],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    instance = OrtInstance.load(
        "r_0", _save(tmp_path, model), OrtSettings(intra_op_threads=2, measure_pool=True)
    )
    assert instance.intra_op_threads == 2


def test_large_work_keeps_the_pool(tmp_path: Path) -> None:
    path = _save(tmp_path, models.resnet18())  # tens of milliseconds per image here
    instance = OrtInstance.load("r18_0", path, OrtSettings(intra_op_threads=2, measure_pool=True))
    assert instance.intra_op_threads == 2
