"""Triton 2.51 live for scripts/bench.py --triton: the tritonserver binary that the nvidia-pytriton
0.7.0 wheel carries, serving the benchmark's models through its Python backend.

The wheel holds no ONNX Runtime backend, so each model is a Python-backend model.py that runs
one default `onnxruntime.InferenceSession(path)`: it concatenates the requests of the batch
Triton's dynamic batcher hands it, runs once and splits the output. Its figures are therefore
Triton's scheduler and front ends plus the Python backend's IPC, not Triton's ORT backend (which
the figures quoted in issue 13 used). The stub imports NumPy and ONNX Runtime from the bench's
own site-packages, so the bench's Python and the stub must be the same minor version (the wheel
has stubs for 3.8 to 3.13, linked against the system's libpython3.X.so.1.0).
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
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
        self.session = ort.InferenceSession({onnx_path!r})

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        output = self.session.run(None, {{self.input: np.concatenate(inputs)}})[0]
        responses, start = [], 0
        for tensor in inputs:
            part = output[start : start + len(tensor)]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, part)]))
            start += len(tensor)
        return responses
"""


def python_config(config: str) -> str:
    """A Convoy variant's config.pbtxt with the Python backend in place of ONNX Runtime."""
    kept = [line for line in config.splitlines() if not line.startswith(("backend:", "platform:"))]
    return "\n".join([*kept, 'backend: "python"', ""])


def write_model(repo: Path, name: str, config: str, onnx_path: Path) -> None:
    """`repo/name/config.pbtxt` and `repo/name/1/model.py` running `onnx_path`."""
    version_dir = repo / name / "1"
    version_dir.mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(python_config(config), encoding="utf-8")
    source = MODEL_PY.format(site_packages=site.getsitepackages(), onnx_path=str(onnx_path))
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
