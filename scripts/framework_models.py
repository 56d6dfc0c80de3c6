"""The project's ONNX models as TorchScript and OpenVINO IR, made by the frameworks themselves:
the same weights and the same graph, so one client call gets the same answer from each backend;
and the example models that need the pytorch or openvino extras.

TorchScript comes from tracing a module that runs the ONNX graph's nodes with torch operators
(the few ops `scripts/models.py` builds); OpenVINO IR from `openvino.convert_model` on the ONNX
file, saved with full-precision weights. torch and openvino are imported only here.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from scripts import models


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def openvino_available() -> bool:
    return importlib.util.find_spec("openvino") is not None


def cxx_available() -> bool:
    """AOTInductor compiles the exported program with the system's C++ compiler."""
    return any(shutil.which(name) for name in ("g++", "c++", "clang++"))


def save_torchscript(model: onnx.ModelProto, examples: list[np.ndarray], path: Path) -> Path:
    """Trace `model` run by torch on `examples` (one array per graph input) and save it; the
    traced module's inputs and outputs are positional (config names `INPUT__0`, `OUTPUT__0`)."""
    torch = importlib.import_module("torch")
    module = _onnx_module(torch, model)
    with torch.no_grad():
        traced = torch.jit.trace(module, tuple(torch.from_numpy(e) for e in examples))
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))
    return path


def save_simple_torchscript(path: Path) -> Path:
    """Triton's "simple" scripted from Python: forward(INPUT0, INPUT1) -> (sum, difference), so
    a config names its inputs after forward's arguments."""
    torch = importlib.import_module("torch")

    class Simple(torch.nn.Module):  # type: ignore[misc, name-defined]
        # Unannotated arguments are Tensors to TorchScript (it reads type comments, so none).
        def forward(self, INPUT0, INPUT1):
            return INPUT0 + INPUT1, INPUT0 - INPUT1

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.script(Simple()).save(str(path))
    return path


def _simple_dict_module(torch: Any) -> Any:
    """Triton's "simple" as PyTorch 2 code takes it: a dict of its inputs in, a dict of its
    outputs back (OUTPUT0 the sum, OUTPUT1 the difference)."""

    class SimpleDict(torch.nn.Module):  # type: ignore[misc, name-defined]
        def forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
            a, b = inputs["INPUT0"], inputs["INPUT1"]
            return {"OUTPUT0": a + b, "OUTPUT1": a - b}

    return SimpleDict().eval()


def simple_eager(input0: np.ndarray, input1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What eager PyTorch answers for simple_aoti's module (the reference for its compiled form):
    OUTPUT0 and OUTPUT1."""
    torch = importlib.import_module("torch")
    with torch.no_grad():
        outputs = _simple_dict_module(torch)(
            {"INPUT0": torch.from_numpy(input0), "INPUT1": torch.from_numpy(input1)}
        )
    return outputs["OUTPUT0"].numpy(), outputs["OUTPUT1"].numpy()


def save_simple_aoti(path: Path) -> Path:
    """Triton's "simple" with a dict in and out (`_simple_dict_module`), exported with
    torch.export for one request of [1, 16] FP32 tensors and compiled ahead of time by
    AOTInductor into a `.pt2` package (the C++ compiler runs here, a few tens of seconds; the
    wrapper is built without optimization to keep that short)."""
    torch = importlib.import_module("torch")
    examples = ({"INPUT0": torch.zeros(1, 16), "INPUT1": torch.zeros(1, 16)},)
    exported = torch.export.export(_simple_dict_module(torch), examples)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch._inductor.aoti_compile_and_package(
        exported,
        package_path=str(path),
        inductor_configs={"aot_inductor.compile_wrapper_opt_level": "O0"},
    )
    return path


def save_openvino_ir(onnx_path: Path, xml_path: Path) -> Path:
    """`onnx_path` converted by OpenVINO and saved as `xml_path` plus the .bin beside it, weights
    kept in FP32 (OpenVINO compresses them to FP16 by default)."""
    ov = importlib.import_module("openvino")
    xml_path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)
    return xml_path


def _onnx_module(torch: Any, model: onnx.ModelProto) -> Any:
    functional = torch.nn.functional
    graph = model.graph
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in graph.initializer}
    inputs = [value.name for value in graph.input if value.name not in weights]
    outputs = [value.name for value in graph.output]

    def attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
        for found in node.attribute:
            if found.name == name:
                return onnx.helper.get_attribute_value(found)
        return default

    def run(node: onnx.NodeProto, args: list[Any]) -> Any:
        op = node.op_type
        if op == "Conv":
            pads = attribute(node, "pads", [0, 0, 0, 0])
            return functional.conv2d(
                args[0],
                args[1],
                args[2],
                stride=attribute(node, "strides", [1, 1]),
                padding=pads[:2],
            )
        if op == "MaxPool":
            return functional.max_pool2d(
                args[0],
                attribute(node, "kernel_shape", [1, 1]),
                stride=attribute(node, "strides", [1, 1]),
                padding=attribute(node, "pads", [0, 0, 0, 0])[:2],
            )
        if op == "Gemm":
            return args[0] @ args[1] + args[2]
        if op == "GlobalAveragePool":
            return args[0].mean(dim=(2, 3), keepdim=True)
        if op == "Flatten":
            return torch.flatten(args[0], attribute(node, "axis", 1))
        if op == "ArgMax":
            return torch.argmax(args[0], dim=attribute(node, "axis", 0), keepdim=True)
        simple = {"Relu": torch.relu, "Add": torch.add, "Sub": torch.sub, "Identity": torch.clone}
        if op in simple:
            return simple[op](*args)
        raise ValueError(f"no torch operator for ONNX op {op}")

    class OnnxGraph(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            for index, value in enumerate(weights.values()):
                self.register_buffer(f"w{index}", value)
            self._names = {name: f"w{index}" for index, name in enumerate(weights)}

        def forward(self, *arrays: Any) -> Any:
            values: dict[str, Any] = dict(zip(inputs, arrays, strict=True))
            values.update({name: getattr(self, attr) for name, attr in self._names.items()})
            for node in graph.node:
                values[node.output[0]] = run(node, [values[name] for name in node.input])
            found = tuple(values[name] for name in outputs)
            return found[0] if len(found) == 1 else found

    return OnnxGraph().eval()


SIMPLE_IO = """\
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
"""


def write_simple_torchscript(repo: Path) -> Path:
    """`simple` as TorchScript: the config names forward's arguments; outputs by config order."""
    config = 'name: "simple_torchscript"\nplatform: "pytorch_libtorch"\n' + SIMPLE_IO
    model_dir = repo / "simple_torchscript"
    save_simple_torchscript(model_dir / "1" / "model.pt")
    (model_dir / "config.pbtxt").write_text(config + "dynamic_batching { }\n", encoding="utf-8")
    return model_dir


def write_simple_aoti(repo: Path) -> Path:
    """`simple` as a PyTorch 2 AOTInductor package (`platform: "torch_aoti"`): one request at a
    time (Triton's beta serves batch size 1); its dict input and output go by key."""
    config = 'name: "simple_aoti"\nplatform: "torch_aoti"\n' + SIMPLE_IO.replace(
        "max_batch_size: 8", "max_batch_size: 1"
    )
    model_dir = repo / "simple_aoti"
    save_simple_aoti(model_dir / "1" / "model.pt2")
    (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
    return model_dir


def write_simple_openvino(repo: Path) -> Path:
    """`simple` as OpenVINO IR (model.xml + model.bin), converted from its ONNX file."""
    model_dir = repo / "simple_openvino"
    onnx_path = model_dir / "simple.onnx"
    model_dir.mkdir(parents=True, exist_ok=True)
    onnx.save_model(models.simple(), onnx_path)
    save_openvino_ir(onnx_path, model_dir / "1" / "model.xml")
    onnx_path.unlink()
    config = 'name: "simple_openvino"\nbackend: "openvino"\n' + SIMPLE_IO
    (model_dir / "config.pbtxt").write_text(config + "dynamic_batching { }\n", encoding="utf-8")
    return model_dir


def write_simple_frameworks(repo: Path) -> Path:
    """An ensemble crossing three frameworks: TorchScript `simple_torchscript` feeds the ONNX
    `simple`, which feeds `simple_openvino`; OUTPUT0 = 2 (a + b), OUTPUT1 = 2 (a - b)."""
    steps, feeds = [], ("INPUT0", "INPUT1")
    for index, model in enumerate(("simple_torchscript", "simple", "simple_openvino")):
        outs = ("OUTPUT0", "OUTPUT1") if index == 2 else (f"SUM{index}", f"DIFF{index}")
        steps.append(
            f'    {{ model_name: "{model}" model_version: -1\n'
            f'      input_map {{ key: "INPUT0" value: "{feeds[0]}" }}\n'
            f'      input_map {{ key: "INPUT1" value: "{feeds[1]}" }}\n'
            f'      output_map {{ key: "OUTPUT0" value: "{outs[0]}" }}\n'
            f'      output_map {{ key: "OUTPUT1" value: "{outs[1]}" }} }}'
        )
        feeds = outs
    config = (
        'name: "simple_frameworks"\nplatform: "ensemble"\n'
        + SIMPLE_IO
        + "ensemble_scheduling {\n  step [\n"
        + ",\n".join(steps)
        + "\n  ]\n}\n"
    )
    model_dir = repo / "simple_frameworks"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
    return model_dir


# name -> (writer, the extras it needs; "c++", a C++ compiler on the PATH)
EXAMPLES = (
    ("simple_torchscript", write_simple_torchscript, ("pytorch",)),
    ("simple_aoti", write_simple_aoti, ("pytorch", "c++")),
    ("simple_openvino", write_simple_openvino, ("openvino",)),
    ("simple_frameworks", write_simple_frameworks, ("pytorch", "openvino")),
)


def write_examples(repo: Path, *, skip_existing: bool = False) -> list[Path]:
    """The example models needing the pytorch or openvino extras, where they are installed;
    the others are named with the extra that would bring them."""
    have = {"pytorch": torch_available(), "openvino": openvino_available(), "c++": cxx_available()}
    written = []
    for name, write, extras in EXAMPLES:
        missing = [extra for extra in extras if not have[extra]]
        if missing == ["c++"]:
            print(f"skipped {repo / name} (AOTInductor needs a C++ compiler: g++, c++ or clang++)")
        elif missing:
            hint = ",".join(extra for extra in missing if extra != "c++")
            print(f"skipped {repo / name} (needs pip install 'convoy[{hint}]')")
        elif skip_existing and (repo / name).exists():
            print(f"skipped {repo / name} (exists)")
        else:
            written.append(write(repo))
            print(f"wrote   {repo / name}")
    return written
