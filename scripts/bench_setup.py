"""The models scripts/bench.py serves: each model's variants and their configs, the repository
and request bodies it writes, and the plan of what is measured over which front end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

from scripts import models
from scripts.bench_drivers import random_input

# The `wait` variant: Convoy's adaptive delay off, so every batch that reaches no preferred size
# waits out the whole delay, as Triton's batcher does.
TRITON_WAIT = 'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "false" } }\n'
# Each spec's one instance group, as its config writes it: count and kind.
INSTANCE_GROUP = re.compile(r"^instance_group \[ \{ count: (\d+) kind: (\w+) \} \]$", re.MULTILINE)
RAW = "Content-Type: application/octet-stream"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One benchmarked model: its file, the config shared by its variants, and what to try."""

    name: str  # variant `<name>_<batching>` serves the same file under `<name>.onnx`
    build: Callable[[], onnx.ModelProto]
    config: str  # config.pbtxt of the `off` variant, without `name`
    dynamic_batching: str  # the block added for `on` and `wait`
    batchings: tuple[str, ...]  # the variants served
    ceiling_batch_sizes: tuple[int, ...]  # batch sizes the in-process ceiling tries
    front_ends: tuple[str, ...]  # those `on` is measured over (bench_results.FRONT_ENDS)
    canned: bool  # also measure the bare grpc.aio server with this model's config


SPECS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(
        name="mlp",
        build=models.mlp,
        config="""\
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
        dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 2000 }\n",
        batchings=("off", "on", "wait"),
        ceiling_batch_sizes=(1, 2, 4, 8, 16, 32, 64),
        front_ends=("grpc", "stream", "http"),
        canned=True,
    ),
    # scripts/gen_models.py's resnet18, as the seed writes it.
    "resnet18": ModelSpec(
        name="resnet18",
        build=models.resnet18,
        config="""\
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
        dynamic_batching="""\
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 2000
}
""",
        batchings=("off", "on"),
        ceiling_batch_sizes=(1, 2, 4, 8, 16, 32),
        front_ends=("grpc",),
        canned=False,
    ),
}


@dataclass(frozen=True, slots=True)
class Placing:
    """Where the served variants' instances run: the spec's own groups, or `count` of `kind`."""

    kind: str = ""  # e.g. KIND_GPU; empty keeps each spec's instance_group
    count: int = 0  # instances per variant; 0 keeps the spec's count


@dataclass(frozen=True, slots=True)
class Plan:
    """One measurement of a served model: which variant, over which front end."""

    spec: ModelSpec
    batching: str
    front_end: str

    @property
    def model(self) -> str:
        return f"{self.spec.name}_{self.batching}"


def variant_config(spec: ModelSpec, batching: str, placing: Placing = Placing()) -> str:
    config = f'name: "{spec.name}_{batching}"\n{spec.config}'
    found = INSTANCE_GROUP.search(config)
    if found is not None and (placing.kind or placing.count):
        count, kind = placing.count or found[1], placing.kind or found[2]
        config = INSTANCE_GROUP.sub(f"instance_group [ {{ count: {count} kind: {kind} }} ]", config)
    if batching != "off":
        config += spec.dynamic_batching
    if batching == "wait":
        config += TRITON_WAIT
    return config


def build_repository(root: Path, specs: Sequence[ModelSpec], placing: Placing = Placing()) -> Path:
    """Write each ONNX file once as `root/<name>.onnx` and link it into every variant's model
    dir; also write the request bodies the HTTP clients send (`root/<name>.raw`, `.kserve`)."""
    repo = root / "repository"
    for spec in specs:
        onnx_path = root / f"{spec.name}.onnx"
        onnx.save_model(spec.build(), onnx_path)
        for batching in spec.batchings:
            name = f"{spec.name}_{batching}"
            model_dir = models.write_model(
                repo, name, None, variant_config(spec, batching, placing)
            )
            (model_dir / "1").mkdir()
            (model_dir / "1" / "model.onnx").symlink_to(onnx_path)
        _write_bodies(root, spec.name, onnx_path)
    return repo


def _write_bodies(root: Path, name: str, onnx_path: Path) -> None:
    """The batch-1 input as raw FP32 bytes (FastAPI) and as a KServe binary-tensor request
    (Convoy's HTTP): a JSON header, its length in the Inference-Header-Content-Length header."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    meta, output = session.get_inputs()[0], session.get_outputs()[0]
    raw = random_input(meta.shape, 1).tobytes()
    header = {
        "inputs": [
            {
                "name": meta.name,
                "shape": [1, *meta.shape[1:]],
                "datatype": "FP32",
                "parameters": {"binary_data_size": len(raw)},
            }
        ],
        "outputs": [{"name": output.name, "parameters": {"binary_data": True}}],
    }
    encoded = json.dumps(header).encode()
    (root / f"{name}.raw").write_bytes(raw)
    (root / f"{name}.kserve").write_bytes(encoded + raw)
    (root / f"{name}.kserve.header").write_text(str(len(encoded)), encoding="ascii")


def kserve_headers(root: Path, name: str) -> tuple[str, ...]:
    length = (root / f"{name}.kserve.header").read_text(encoding="ascii")
    return RAW, f"Inference-Header-Content-Length: {length}"


def plans(specs: Sequence[ModelSpec], workers: int, front_ends: Sequence[str]) -> list[Plan]:
    """Every variant over unary gRPC with the in-process front end, and `on` over each front
    end (the spec's, or `front_ends` if any) with every worker count."""
    out = []
    for spec in specs:
        if workers == 0:
            out += [Plan(spec, b, "grpc") for b in spec.batchings if b != "on"]
        out += [Plan(spec, "on", fe) for fe in front_ends or spec.front_ends]
    return out
