"""The generated ONNX models are valid, load in onnxruntime on CPU and compute what they claim."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2

from scripts import models

# BF16 has no NumPy dtype, so it gets its own test through OrtValue buffers.
NUMPY_IDENTITY_TYPES = [t for t in models.CONFIG_DATA_TYPES if t != TensorProto.BFLOAT16]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _random_array(elem_type: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if elem_type == TensorProto.STRING:
        # onnxruntime's Python binding wants str objects; bytes would be stringified as "b'..'".
        words = np.array(["", "a", "naïve", "日本", "nul\x00inside", "x" * 300], dtype=object)
        return rng.choice(words, size=shape)
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def resnet18() -> onnx.ModelProto:
    return models.resnet18()


SMALL_BUILDERS = [
    pytest.param(models.simple, id="simple"),
    pytest.param(partial(models.simple, TensorProto.INT32), id="simple_int32"),
    pytest.param(models.mlp, id="mlp"),
    pytest.param(models.bytes_identity, id="bytes_identity"),
    *(
        pytest.param(partial(models.identity, t), id=f"identity_{helper.tensor_dtype_to_string(t)}")
        for t in models.CONFIG_DATA_TYPES
    ),
]


@pytest.mark.parametrize("build", SMALL_BUILDERS)
def test_small_models_pass_the_checker_with_pinned_versions(
    build: Callable[[], onnx.ModelProto],
) -> None:
    model = build()
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == models.IR_VERSION
    assert [(o.domain, o.version) for o in model.opset_import] == [("", models.OPSET)]


@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT, TensorProto.INT32])
def test_simple_computes_sum_and_difference(elem_type: int) -> None:
    rng = np.random.default_rng(1)
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    # Small values so INT32 sums cannot overflow.
    a, b = (rng.integers(-1000, 1000, size=(3, 16)).astype(dtype) for _ in range(2))
    out0, out1 = _session(models.simple(elem_type)).run(None, {"INPUT0": a, "INPUT1": b})
    assert out0.dtype == dtype
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


@pytest.mark.parametrize("elem_type", NUMPY_IDENTITY_TYPES, ids=helper.tensor_dtype_to_string)
def test_identity_returns_its_input(elem_type: int) -> None:
    shape = (3, 5) if elem_type == TensorProto.STRING else (3, 4)
    x = _random_array(elem_type, shape, np.random.default_rng(2))
    (y,) = _session(models.identity(elem_type)).run(None, {"INPUT0": x})
    assert y.shape == x.shape
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


def test_bf16_identity_returns_its_input_bits() -> None:
    session = _session(models.identity(TensorProto.BFLOAT16))
    bits = np.random.default_rng(3).integers(0, 2**16, size=(2, 4), dtype=np.uint16)
    out = np.zeros_like(bits)
    binding = session.io_binding()
    bf16 = TensorProto.BFLOAT16
    binding.bind_ortvalue_input(
        "INPUT0", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, bf16)
    )
    binding.bind_ortvalue_output(
        "OUTPUT0", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, bf16)
    )
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, bits)


@pytest.mark.parametrize(
    "elem_type", list(models.CONFIG_DATA_TYPES), ids=helper.tensor_dtype_to_string
)
def test_identity_config_parses_and_matches_the_model(elem_type: int) -> None:
    text = models.identity_config("identity_t", elem_type, max_batch_size=4)
    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    model_shape = models.identity(elem_type).graph.input[0].type.tensor_type.shape.dim
    assert config.name == "identity_t"
    assert config.max_batch_size == 4
    for tensor in (*config.input, *config.output):
        assert (
            model_config_pb2.DataType.Name(tensor.data_type) == models.CONFIG_DATA_TYPES[elem_type]
        )
        assert list(tensor.dims) == [d.dim_value or -1 for d in model_shape[1:]]


def test_mlp_maps_a_batch_to_ten_finite_scores() -> None:
    x = np.random.default_rng(4).standard_normal((2, 256), dtype=np.float32)
    (y,) = _session(models.mlp()).run(None, {"INPUT": x})
    assert y.shape == (2, 10)
    assert np.isfinite(y).all()


def test_resnet18_maps_a_batch_to_1000_finite_scores(resnet18: onnx.ModelProto) -> None:
    onnx.checker.check_model(resnet18)
    x = np.random.default_rng(5).standard_normal((2, 3, 224, 224), dtype=np.float32)
    (y,) = _session(resnet18).run(None, {"input": x})
    assert y.shape == (2, 1000)
    assert np.isfinite(y).all()
    assert not np.allclose(y[0], y[1])


def test_resnet18_has_the_resnet18_layer_count(resnet18: onnx.ModelProto) -> None:
    ops = [node.op_type for node in resnet18.graph.node]
    # 1 stem conv + 16 block convs + 3 downsample convs; 1 FC.
    assert ops.count("Conv") == 20
    assert ops.count("Gemm") == 1
    assert ops.count("Add") == 8


def test_builders_are_deterministic_per_seed() -> None:
    assert models.mlp(seed=7) == models.mlp(seed=7)
    assert models.mlp(seed=7) != models.mlp(seed=8)


def test_write_model_writes_config_verbatim_and_a_loadable_model(tmp_path: Path) -> None:
    config = 'name: "simple"\n# kept as written\n'
    model_dir = models.write_model(tmp_path, "simple", models.simple(), config, version=3)
    assert model_dir == tmp_path / "simple"
    assert (model_dir / "config.pbtxt").read_text(encoding="utf-8") == config
    session = ort.InferenceSession(str(model_dir / "3" / "model.onnx"))
    assert [i.name for i in session.get_inputs()] == ["INPUT0", "INPUT1"]


def test_write_model_with_none_leaves_that_file_out(tmp_path: Path) -> None:
    no_config = models.write_model(tmp_path, "auto", models.simple(), None)
    no_model = models.write_model(tmp_path, "empty", None, 'name: "empty"\n')
    assert sorted(p.name for p in no_config.iterdir()) == ["1"]
    assert sorted(p.name for p in no_model.iterdir()) == ["config.pbtxt"]
