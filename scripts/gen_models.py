"""Write the example model repository: simple, simple_int32, mlp, resnet18, identity_bytes, and
the seed's pipeline: preprocess (Python backend) -> resnet18 -> label_head, served as `classify`,
and two stateful (sequence) models: accumulate (ONNX, implicit state) and accumulate_python.
With the pytorch and openvino extras installed, also `simple` as TorchScript (simple_torchscript)
and as OpenVINO IR (simple_openvino), and simple_frameworks, an ensemble crossing all three; with
the pytorch extra and a C++ compiler, `simple` compiled by AOTInductor (simple_aoti, torch_aoti).

Usage: python scripts/gen_models.py [OUT_DIR] [--skip-existing]   (OUT_DIR defaults to `models`)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/gen_models.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnx import TensorProto

from scripts import framework_models, models


def write_simple(repo: Path) -> Path:
    config = """\
name: "simple"
platform: "onnxruntime_onnx"
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
    return models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), config)


def write_simple_int32(repo: Path) -> Path:
    config = """\
name: "simple_int32"
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""
    return models.write_model(repo, "simple_int32", models.simple(TensorProto.INT32), config)


def write_mlp(repo: Path) -> Path:
    config = """\
name: "mlp"
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { }
"""
    return models.write_model(repo, "mlp", models.mlp(), config)


def write_resnet18(repo: Path) -> Path:
    config = """\
name: "resnet18"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 2000
}
"""
    return models.write_model(repo, "resnet18", models.resnet18(), config)


def write_identity_bytes(repo: Path) -> Path:
    config = """\
name: "identity_bytes"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""
    return models.write_model(repo, "identity_bytes", models.bytes_identity(), config)


def write_label_head(repo: Path) -> Path:
    config = """\
name: "label_head"
backend: "onnxruntime"
max_batch_size: 32
input [ { name: "LOGITS" data_type: TYPE_FP32 dims: [ 1000 ] } ]
output [ { name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
"""
    return models.write_model(repo, "label_head", models.label_head(), config)


def write_preprocess(repo: Path) -> Path:
    config = """\
name: "preprocess"
backend: "python"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { }
"""
    source = (Path(__file__).parent / "python_models" / "preprocess.py").read_text()
    return models.write_python_model(repo, "preprocess", source, config)


def write_accumulate(repo: Path) -> Path:
    config = """\
name: "accumulate"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [
    {
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" }
    }
  ]
}
"""
    return models.write_model(repo, "accumulate", models.accumulator(), config)


ACCUMULATE_PY = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A running total per sequence, kept by the model itself and keyed by the CORRID control
    (which must be the request's correlation_id(), as START and END must be its flags()): START
    resets it to INPUT, every request adds INPUT, END forgets the sequence."""

    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def read(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            value = int(read("INPUT").reshape(-1)[0])
            corrid = int(read("CORRID").reshape(-1)[0])
            if read("READY").reshape(-1)[0] and corrid != request.correlation_id():
                error = pb_utils.TritonError(f"CORRID {corrid} is not {request.correlation_id()}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            flags = (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START * bool(read("START")[0])) | (
                pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END * bool(read("END")[0])
            )
            if read("READY").reshape(-1)[0] and flags != request.flags():
                error = pb_utils.TritonError(f"flags {request.flags()} are not {flags}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            if read("READY").reshape(-1)[0]:
                start = bool(read("START").reshape(-1)[0])
                total = value + (0 if start else self.totals.get(corrid, 0))
                self.totals[corrid] = total
                if read("END").reshape(-1)[0]:
                    del self.totals[corrid]
            else:
                total = 0
            output = pb_utils.Tensor("OUTPUT", np.array([total], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[output]))
        return responses
'''


def write_accumulate_python(repo: Path) -> Path:
    config = """\
name: "accumulate_python"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
instance_group [ { kind: KIND_CPU count: 2 } ]
"""
    return models.write_python_model(repo, "accumulate_python", ACCUMULATE_PY, config)


def write_classify(repo: Path) -> Path:
    config = """\
name: "classify"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "LOGITS" data_type: TYPE_FP32 dims: [ 1000 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "IMAGE" value: "IMAGE" }
      output_map { key: "PIXELS" value: "pixels" }
    },
    {
      model_name: "resnet18"
      model_version: -1
      input_map { key: "input" value: "pixels" }
      output_map { key: "output" value: "LOGITS" }
    },
    {
      model_name: "label_head"
      model_version: -1
      input_map { key: "LOGITS" value: "LOGITS" }
      output_map { key: "LABEL" value: "LABEL" }
    }
  ]
}
"""
    # An ensemble has no model file, but, as in Triton, a version directory.
    (repo / "classify" / "1").mkdir(parents=True, exist_ok=True)
    return models.write_model(repo, "classify", None, config)


EXAMPLES: tuple[tuple[str, Callable[[Path], Path]], ...] = (
    ("simple", write_simple),
    ("simple_int32", write_simple_int32),
    ("mlp", write_mlp),
    ("resnet18", write_resnet18),
    ("identity_bytes", write_identity_bytes),
    ("label_head", write_label_head),
    ("preprocess", write_preprocess),
    ("classify", write_classify),
    ("accumulate", write_accumulate),
    ("accumulate_python", write_accumulate_python),
)


def write_example_repository(repo: Path, *, skip_existing: bool = False) -> list[Path]:
    """Write every example model under `repo`; returns the model directories written."""
    written: list[Path] = []
    for name, write in EXAMPLES:
        if skip_existing and (repo / name).exists():
            print(f"skipped {repo / name} (exists)")
            continue
        start_s = time.perf_counter()
        model_dir = write(repo)
        size_bytes = sum(f.stat().st_size for f in model_dir.rglob("*") if f.is_file())
        elapsed_s = time.perf_counter() - start_s
        print(f"wrote   {model_dir} ({size_bytes / 1e6:.1f} MB, {elapsed_s:.2f} s)")
        written.append(model_dir)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the example model repository.")
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("models"))
    parser.add_argument(
        "--skip-existing", action="store_true", help="leave model directories that already exist"
    )
    args = parser.parse_args(argv)
    write_example_repository(args.out_dir, skip_existing=args.skip_existing)
    # TorchScript, OpenVINO IR and a cross-framework ensemble, where those extras are installed.
    framework_models.write_examples(args.out_dir, skip_existing=args.skip_existing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
