"""ONNX models built in code with seeded random weights, and a writer for Triton-style model dirs.

Nothing is downloaded: every builder is deterministic for a given seed and returns a ModelProto.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET: Final = 17
# IR 8 is the IR version that shipped with opset 17 (onnx 1.12); pinning it rather than taking
# onnx's newest keeps the files loadable by every onnxruntime the project supports (>= 1.20).
IR_VERSION: Final = 8
BATCH_DIM: Final = "batch"

# ONNX element type -> config.pbtxt data_type. Every entry runs through onnxruntime's CPU
# Identity kernel (checked by tests/scripts/test_models.py), so this doubles as the list of
# element types the identity builder supports.
CONFIG_DATA_TYPES: Final[Mapping[int, str]] = MappingProxyType(
    {
        TensorProto.BOOL: "TYPE_BOOL",
        TensorProto.UINT8: "TYPE_UINT8",
        TensorProto.UINT16: "TYPE_UINT16",
        TensorProto.UINT32: "TYPE_UINT32",
        TensorProto.UINT64: "TYPE_UINT64",
        TensorProto.INT8: "TYPE_INT8",
        TensorProto.INT16: "TYPE_INT16",
        TensorProto.INT32: "TYPE_INT32",
        TensorProto.INT64: "TYPE_INT64",
        TensorProto.FLOAT16: "TYPE_FP16",
        TensorProto.FLOAT: "TYPE_FP32",
        TensorProto.DOUBLE: "TYPE_FP64",
        TensorProto.BFLOAT16: "TYPE_BF16",
        TensorProto.STRING: "TYPE_STRING",
    }
)


def write_model(
    repo: Path,
    name: str,
    model: onnx.ModelProto | None,
    config_pbtxt: str | None,
    version: int = 1,
) -> Path:
    """Write `<repo>/<name>/config.pbtxt` (verbatim) and `<repo>/<name>/<version>/model.onnx`.

    None skips that file: no config exercises auto-complete, no model exercises load failures.
    Returns the model directory.
    """
    model_dir = repo / name
    model_dir.mkdir(parents=True, exist_ok=True)
    if config_pbtxt is not None:
        (model_dir / "config.pbtxt").write_text(config_pbtxt, encoding="utf-8")
    if model is not None:
        version_dir = model_dir / str(version)
        version_dir.mkdir(exist_ok=True)
        onnx.save_model(model, version_dir / "model.onnx")
    return model_dir


def simple(elem_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """Triton's "simple": OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, all [batch, 16]."""
    shape: list[str | int | None] = [BATCH_DIM, 16]
    inputs = [helper.make_tensor_value_info(n, elem_type, shape) for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, elem_type, shape) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    return _model("simple", nodes, inputs, outputs, [])


def identity_dims(elem_type: int) -> list[int]:
    """Dims of the identity model's tensors without the batch dim; strings are ragged."""
    return [-1] if elem_type == TensorProto.STRING else [4]


def identity(elem_type: int) -> onnx.ModelProto:
    """INPUT0 -> Identity -> OUTPUT0 for any element type in CONFIG_DATA_TYPES."""
    if elem_type not in CONFIG_DATA_TYPES:
        raise ValueError(f"identity: element type {elem_type} has no config data_type mapping")
    shape: list[str | int | None] = [BATCH_DIM]
    shape += [None if d < 0 else d for d in identity_dims(elem_type)]
    nodes = [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")]
    inputs = [helper.make_tensor_value_info("INPUT0", elem_type, shape)]
    outputs = [helper.make_tensor_value_info("OUTPUT0", elem_type, shape)]
    return _model("identity", nodes, inputs, outputs, [])


def bytes_identity() -> onnx.ModelProto:
    """String-tensor identity, [batch, -1] in and out (the example repo's `identity_bytes`)."""
    return identity(TensorProto.STRING)


def identity_config(name: str, elem_type: int, max_batch_size: int = 8) -> str:
    """config.pbtxt text matching `identity(elem_type)`."""
    data_type = CONFIG_DATA_TYPES[elem_type]
    dims = ", ".join(str(d) for d in identity_dims(elem_type))
    return (
        f'name: "{name}"\n'
        'backend: "onnxruntime"\n'
        f"max_batch_size: {max_batch_size}\n"
        f'input [ {{ name: "INPUT0" data_type: {data_type} dims: [ {dims} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: {data_type} dims: [ {dims} ] }} ]\n'
    )


def mlp(seed: int = 0) -> onnx.ModelProto:
    """FP32 INPUT [batch, 256] -> Gemm 256x512 + Relu -> Gemm 512x10 -> OUTPUT [batch, 10]."""
    g = _GraphBuilder(np.random.default_rng(seed))
    hidden = g.relu(g.gemm("INPUT", 256, 512))
    g.gemm(hidden, 512, 10, output="OUTPUT")
    inputs = [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [BATCH_DIM, 256])]
    outputs = [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [BATCH_DIM, 10])]
    return _model("mlp", g.nodes, inputs, outputs, g.initializers)


def label_head(classes: int = 1000) -> onnx.ModelProto:
    """FP32 LOGITS [batch, classes] -> ArgMax -> INT64 LABEL [batch, 1]: the seed's label head."""
    nodes = [helper.make_node("ArgMax", ["LOGITS"], ["LABEL"], axis=1, keepdims=1, name="argmax")]
    inputs = [helper.make_tensor_value_info("LOGITS", TensorProto.FLOAT, [BATCH_DIM, classes])]
    outputs = [helper.make_tensor_value_info("LABEL", TensorProto.INT64, [BATCH_DIM, 1])]
    return _model("label_head", nodes, inputs, outputs, [])


def accumulator() -> onnx.ModelProto:
    """Triton's example sequence model with implicit state: INT32 [batch, 1] tensors INPUT, the
    controls START and READY and the state INPUT_STATE in; OUTPUT and OUTPUT_STATE out, both the
    running total (INPUT on START, the state plus INPUT after; a not-ready slot keeps its state)."""
    shape: list[int | str] = [BATCH_DIM, 1]
    names = ("INPUT", "START", "READY", "INPUT_STATE")
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT32, shape) for name in names]
    one = numpy_helper.from_array(np.array([[1]], dtype=np.int32), "one")
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"]),  # 0 on START: forget the state
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["kept", "INPUT"], ["total"]),
        helper.make_node("Mul", ["total", "READY"], ["ready_total"]),
        helper.make_node("Sub", ["one", "READY"], ["idle"]),
        helper.make_node("Mul", ["INPUT_STATE", "idle"], ["idle_state"]),
        helper.make_node("Add", ["ready_total", "idle_state"], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.INT32, shape)
        for name in ("OUTPUT", "OUTPUT_STATE")
    ]
    return _model("accumulator", nodes, inputs, outputs, [one])


def ragged_sum() -> onnx.ModelProto:
    """A ragged batching model as Triton's backends take one: FP32 INPUT [elements] holds the
    batch's requests end to end, INT32 OFFSETS [batch + 1] where each starts (the batch input
    BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO); out: SUM [batch, 1], each request's sum, and
    DOUBLED [elements], INPUT times two (for BATCH_SCATTER_WITH_INPUT_SHAPE)."""
    inputs = [
        helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["elements"]),
        helper.make_tensor_value_info("OFFSETS", TensorProto.INT32, ["edges"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([0], np.float32), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axis"),
        numpy_helper.from_array(np.array([0], np.int64), "first"),
        numpy_helper.from_array(np.array([1], np.int64), "second"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "end"),
        numpy_helper.from_array(np.array([2.0], np.float32), "two"),
    ]
    nodes = [
        helper.make_node("CumSum", ["INPUT", "axis"], ["running"]),
        helper.make_node("Concat", ["zero", "running"], ["totals"], axis=0),  # totals[i]: sum < i
        helper.make_node("Slice", ["OFFSETS", "first", "last"], ["starts"]),
        helper.make_node("Slice", ["OFFSETS", "second", "end"], ["ends"]),
        helper.make_node("Gather", ["totals", "starts"], ["before"]),
        helper.make_node("Gather", ["totals", "ends"], ["through"]),
        helper.make_node("Sub", ["through", "before"], ["sums"]),
        helper.make_node("Unsqueeze", ["sums", "second"], ["SUM"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
    ]
    outputs = [
        helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["batch", 1]),
        helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["elements"]),
    ]
    return _model("ragged_sum", nodes, inputs, outputs, constants)


# A decoupled Python model: COUNT responses of INDEX 0..COUNT-1 per request, then the final flag
# alone; a negative COUNT is answered with an error.
REPEAT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().ravel()[0])
            if count < 0:
                error = pb_utils.TritonError("COUNT must be >= 0")
                sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for index in range(count):
                out = pb_utils.Tensor("INDEX", np.array([[index]], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


# A Python model that holds every batch until the file named by its `gate` parameter exists,
# then answers X + 1: requests held inside a model as long as a test asks (the load tests).
GATED_MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]

    def execute(self, requests):
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)
            ])
            for r in requests
        ]
"""


# A Python model that sleeps as long as its batch's largest X (seconds), then answers X as Y: a
# request that stays in flight as long as a test asks (the drain tests and scripts/drain_check.py).
SLEEPY_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        time.sleep(float(max(np.max(x) for x in xs)))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]) for x in xs]
"""


def write_sleepy(repo: Path, name: str = "sleepy") -> Path:
    """SLEEPY_MODEL as `name` (X and Y FP32 [1], batches of up to 8, one instance), run in the
    server's process."""
    config = (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n"
        'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'
    )
    return write_python_model(repo, name, SLEEPY_MODEL, config)


def write_python_model(repo: Path, name: str, source: str, config_pbtxt: str) -> Path:
    """Write `<repo>/<name>/config.pbtxt` and `<repo>/<name>/1/model.py` (a Python model)."""
    version_dir = repo / name / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config_pbtxt, encoding="utf-8")
    (version_dir / "model.py").write_text(source, encoding="utf-8")
    return repo / name


def write_repeat_model(
    repo: Path, name: str = "repeat", extra_config: str = "", reshape: str = ""
) -> Path:
    """The decoupled `REPEAT_MODEL` as `<repo>/<name>` (max batch 8, INT32 COUNT -> INDEX);
    `reshape` goes inside the input's declaration, `extra_config` after the tensors."""
    return write_python_model(
        repo,
        name,
        REPEAT_MODEL,
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        "model_transaction_policy { decoupled: true }\n"
        f'input [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ]{reshape} }} ]\n'
        'output [ { name: "INDEX" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' + extra_config,
    )


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18, BatchNorm folded into conv biases: [batch,3,224,224] -> [batch,1000] logits."""
    g = _GraphBuilder(np.random.default_rng(seed))
    x = g.relu(g.conv("input", 3, 64, kernel=7, stride=2))
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = 64
    for c_out in (64, 128, 256, 512):
        stride = 1 if c_out == 64 else 2
        x = _basic_block(g, x, c_in, c_out, stride)
        x = _basic_block(g, x, c_out, c_out, 1)
        c_in = c_out
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    g.gemm(x, 512, 1000, output="output")
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [BATCH_DIM, 3, 224, 224])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [BATCH_DIM, 1000])]
    return _model("resnet18", g.nodes, inputs, outputs, g.initializers)


def _basic_block(g: _GraphBuilder, x: str, c_in: int, c_out: int, stride: int) -> str:
    """Two 3x3 convs plus a shortcut; the shortcut is a 1x1 conv when the shape changes."""
    y = g.relu(g.conv(x, c_in, c_out, kernel=3, stride=stride))
    y = g.conv(y, c_out, c_out, kernel=3, stride=1)
    shortcut = (
        x if stride == 1 and c_in == c_out else g.conv(x, c_in, c_out, kernel=1, stride=stride)
    )
    return g.relu(g.node("Add", [y, shortcut]))


class _GraphBuilder:
    """Accumulates nodes and He-initialised weights; each layer returns its output tensor name."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._count = 0
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []

    def node(self, op: str, inputs: list[str], *, output: str | None = None, **attrs: Any) -> str:
        """Append one node; `output` names a graph output, otherwise a unique name is made."""
        self._count += 1
        name = f"{op.lower()}_{self._count}"
        output = output or name
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def gemm(self, x: str, n_in: int, n_out: int, *, output: str | None = None) -> str:
        w = self._weight([n_in, n_out], fan_in=n_in)
        b = self._weight([n_out], fan_in=n_in, scale=0.01)
        return self.node("Gemm", [x, w, b], output=output)

    def conv(self, x: str, c_in: int, c_out: int, *, kernel: int, stride: int) -> str:
        # The bias stands in for a folded BatchNorm (beta - gamma * mean / std), which is how
        # inference graphs are usually exported and saves a node per conv.
        w = self._weight([c_out, c_in, kernel, kernel], fan_in=c_in * kernel * kernel)
        b = self._weight([c_out], fan_in=c_in, scale=0.01)
        pad = kernel // 2
        return self.node(
            "Conv",
            [x, w, b],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        )

    def _weight(self, shape: list[int], *, fan_in: int, scale: float = 1.0) -> str:
        # He init keeps the variance of ReLU activations roughly constant layer to layer, so
        # ResNet-18 logits stay in the hundreds instead of overflowing through 18 layers.
        std = scale * math.sqrt(2.0 / fan_in)
        values = self._rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        name = f"w_{len(self.initializers)}"
        self.initializers.append(numpy_helper.from_array(values, name))
        return name


def _model(
    graph_name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, graph_name, inputs, outputs, initializers)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="convoy-scripts",
    )
