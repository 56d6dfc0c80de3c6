"""Triton 2.51 live for scripts/bench.py and scripts/backend_bench.py --triton: the tritonserver
binary that the nvidia-pytriton 0.7.0 wheel carries, serving the benchmarks' models through its
Python backend.

The wheel holds no ONNX Runtime, PyTorch or OpenVINO backend, so each model is a Python-backend
model.py that runs the framework with its default settings: one `onnxruntime.InferenceSession`,
one `torch.jit.load` module under `torch.inference_mode()`, or one model compiled by OpenVINO for
the CPU. It concatenates the requests of the batch Triton's dynamic batcher hands it, runs once
and splits the output. Its figures are therefore Triton's scheduler and front ends plus the
Python backend's IPC, not Triton's framework backends (which the figures quoted in issue 13
used). The stub imports NumPy and the framework from the bench's own site-packages, so the
bench's Python and the stub must be the same minor version (the wheel has stubs for 3.8 to 3.13,
linked against the system's libpython3.X.so.1.0).
"""

from __future__ import annotations

import re
import site
import socket
import sys
from pathlib import Path

STARTED = re.compile(
    r"Started GRPCInferenceService at [\d.]+:(\d+).*Started HTTPService at [\d.]+:(\d+)",
    re.DOTALL,
)
SHM_BYTES = 64 * 1024 * 1024  # the Python backend's shared memory: a resnet18 batch of 32 fits

MODEL_PY = """\
import json
import sys

sys.path[:0] = {site_packages!r}

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
{load}
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        output = self.run(np.concatenate(inputs))
        responses, start = [], 0
        for tensor in inputs:
            part = output[start : start + len(tensor)]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, part)]))
            start += len(tensor)
        return responses
"""
# framework -> initialize's last lines, which set `self.run(batch) -> output` on the model's file
# ({path}), the framework at its default settings
FRAMEWORKS = {
    "onnxruntime": """\
        import onnxruntime as ort
        session = ort.InferenceSession({path!r})
        self.run = lambda batch: session.run(None, {{self.input: batch}})[0]
""",
    # The same with one intra-op thread (scripts/python_bench.py --one-thread).
    "onnxruntime-one-thread": """\
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession({path!r}, options)
        self.run = lambda batch: session.run(None, {{self.input: batch}})[0]
""",
    "pytorch": """\
        import torch
        module = torch.jit.load({path!r})

        def run(batch):
            with torch.inference_mode():
                return module(torch.from_numpy(batch)).numpy()

        self.run = run
""",
    "openvino": """\
        import openvino as ov
        request = ov.Core().compile_model({path!r}, "CPU").create_infer_request()
        self.run = lambda batch: request.infer({{0: batch}})[0].copy()
""",
}


def python_config(config: str) -> str:
    """A Convoy config.pbtxt with the Python backend in place of the one it names."""
    kept = [line for line in config.splitlines() if not line.startswith(("backend:", "platform:"))]
    return "\n".join([*kept, 'backend: "python"', ""])


def write_model(
    repo: Path, name: str, config: str, model_path: Path, framework: str = "onnxruntime"
) -> None:
    """`repo/name/config.pbtxt` and `repo/name/1/model.py` running `model_path` with
    `framework` (a key of FRAMEWORKS)."""
    version_dir = repo / name / "1"
    version_dir.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(python_config(config), encoding="utf-8")
    load = FRAMEWORKS[framework].format(path=str(model_path))
    source = MODEL_PY.format(site_packages=site.getsitepackages(), load=load)
    (version_dir / "model.py").write_text(source, encoding="utf-8")


def backend_directory(triton_dir: Path, root: Path) -> Path:
    """A backend directory under `root` whose python/ links the wheel's backend and the stub for
    this Python (the wheel keeps the stubs apart, one folder per version)."""
    wheel_python = triton_dir / "backends" / "python"
    stub = (
        triton_dir / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}"
    )
    python = root / "backends" / "python"
    python.mkdir(parents=True)
    for source in (*wheel_python.iterdir(), stub / "triton_python_backend_stub"):
        if source.is_file():
            (python / source.name).symlink_to(source)
    return root / "backends"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(triton_dir: Path, repo: Path, backends: Path) -> list[str]:
    """tritonserver on free ports (it takes no port 0); its log names them once it serves."""
    return [
        str(triton_dir / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={backends}",
        f"--backend-config=python,shm-default-byte-size={SHM_BYTES}",
        f"--grpc-port={_free_port()}",
        f"--http-port={_free_port()}",
        f"--metrics-port={_free_port()}",
    ]
