"""What the e2e tests share besides fixtures: the generated repository's layout and builder, and
`ConvoyServer`, one real `python -m server serve` process.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.grpc import service_pb2

from scripts import models
from scripts.drain_check import child_pids
from scripts.gen_models import EXAMPLES, write_example_repository

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
SERVING_LINE = re.compile(r"serving gRPC on [\w.:\[\]-]+:(\d+)(?:, metrics on :(\d+)/metrics)?")
HTTP_PORT = re.compile(r", HTTP on :(\d+)")
# Large enough for a resnet18 batch of 32 (19 MiB) in either direction.
CLIENT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# Wire data type -> ONNX element type of its identity model ([batch, 4]; BYTES is [batch, -1]).
IDENTITY_TYPES: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BF16": TensorProto.BFLOAT16,
    "BYTES": TensorProto.STRING,
}
IDENTITY_MAX_BATCH_SIZE = 8

EXAMPLE_MODELS = tuple(name for name, _ in EXAMPLES)  # the bundled example repository
AUTOCOMPLETE_MODEL = "auto_simple"  # no config.pbtxt at all
PARTIAL_CONFIG_MODEL = "partial_mlp"  # a config.pbtxt without inputs or outputs
PARTIAL_CONFIG_MAX_BATCH_SIZE = 16
NO_BATCH_MODEL = "nobatch_fp32"  # max_batch_size: 0, dims [2, 4]
NO_BATCH_DIMS = (2, 4)
VERSIONS_ALL_MODEL = "versions_all"  # version_policy: { all {} }, dirs 1, 2 and "notes"
VERSIONS_LATEST_MODEL = "versions_latest"  # default policy (latest 1), dirs 1, 2 and "notes"

# A Python model answering X as Y and its request's parameters (JSON) as PARAMETERS.
ECHO_PARAMETERS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy()),
                pb_utils.Tensor("PARAMETERS", np.array([[r.parameters()]], dtype=object)),
            ])
            for r in requests
        ]
"""

# Broken models and a piece of the reason RepositoryIndex must give for each.
BROKEN_MODELS: dict[str, str] = {
    "broken_typo": "config.pbtxt: line 3",
    "broken_input_name": "INPUT9",
    "broken_dtype": "TYPE_INT32",
    "broken_garbage": "model.onnx",
    "broken_python": "model.py",
    "broken_ens_unknown": "'no_such_model' is not available",
    "broken_ens_cycle": "depend on each other (a cycle)",
    "broken_ens_unmapped": "tensor 'nowhere'",
    "broken_ens_dtype": "is TYPE_INT32 from ensemble input 'IN'",
    "broken_ens_shape": "has shape [-1, 8]",
}

# Broken ensembles over `simple`: (ensemble input dtype, dims, steps as (inputs, outputs, model)).
_BROKEN_ENSEMBLES: dict[str, tuple[str, int, list[tuple[str, str, str]]]] = {
    "broken_ens_unknown": ("TYPE_FP32", 16, [("IN", "IN", "no_such_model")]),
    "broken_ens_cycle": ("TYPE_FP32", 16, [("b", "OUT", "simple"), ("OUT", "b", "simple")]),
    "broken_ens_unmapped": ("TYPE_FP32", 16, [("nowhere", "OUT", "simple")]),
    "broken_ens_dtype": ("TYPE_INT32", 16, [("IN", "OUT", "simple")]),
    "broken_ens_shape": ("TYPE_FP32", 8, [("IN", "OUT", "simple")]),
}
TYPO_FIELD = "max_batch_sise"


def identity_model(datatype: str) -> str:
    """Name of the identity model for a wire data type (BYTES is the example `identity_bytes`)."""
    return "identity_bytes" if datatype == "BYTES" else f"identity_{datatype.lower()}"


def swapped_simple() -> onnx.ModelProto:
    """`simple` with the operations swapped (OUTPUT0 = INPUT0 - INPUT1), to tell versions apart."""
    model = models.simple(TensorProto.FLOAT)
    add, sub = model.graph.node
    add.op_type, sub.op_type = "Sub", "Add"
    return model


def _simple_config(name: str, policy: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n{policy}'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    )


def build_repository(repo: Path) -> Path:
    """Every model the e2e tests use, good and broken, under `repo`."""
    write_example_repository(repo)
    for datatype, elem_type in IDENTITY_TYPES.items():
        name = identity_model(datatype)
        if datatype != "BYTES":
            config = models.identity_config(name, elem_type, IDENTITY_MAX_BATCH_SIZE)
            models.write_model(repo, name, models.identity(elem_type), config)

    models.write_model(repo, AUTOCOMPLETE_MODEL, models.simple(TensorProto.FLOAT), None)
    models.write_model(
        repo,
        PARTIAL_CONFIG_MODEL,
        models.mlp(seed=1),
        f'name: "{PARTIAL_CONFIG_MODEL}"\nbackend: "onnxruntime"\n'
        f"max_batch_size: {PARTIAL_CONFIG_MAX_BATCH_SIZE}\n",
    )
    dims = ", ".join(str(d) for d in NO_BATCH_DIMS)
    models.write_model(
        repo,
        NO_BATCH_MODEL,
        models.identity(TensorProto.FLOAT),
        f'name: "{NO_BATCH_MODEL}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n',
    )
    for name, policy in (
        (VERSIONS_ALL_MODEL, "version_policy: { all {} }\n"),
        (VERSIONS_LATEST_MODEL, ""),
    ):
        models.write_model(repo, name, models.simple(TensorProto.FLOAT), None, version=1)
        models.write_model(repo, name, swapped_simple(), _simple_config(name, policy), version=2)
        (repo / name / "notes").mkdir()
        (repo / name / "notes" / "README").write_text("not a version\n", encoding="utf-8")

    fp32_identity = models.identity(TensorProto.FLOAT)
    models.write_model(
        repo,
        "broken_typo",
        fp32_identity,
        'name: "broken_typo"\nbackend: "onnxruntime"\n'
        f"{TYPO_FIELD}: 8\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    )
    models.write_model(
        repo,
        "broken_input_name",
        fp32_identity,
        models.identity_config("broken_input_name", TensorProto.FLOAT).replace(
            '"INPUT0"', '"INPUT9"'
        ),
    )
    models.write_model(
        repo,
        "broken_dtype",
        fp32_identity,
        models.identity_config("broken_dtype", TensorProto.FLOAT).replace(
            "TYPE_FP32", "TYPE_INT32"
        ),
    )
    garbage = models.write_model(
        repo,
        "broken_garbage",
        None,
        models.identity_config("broken_garbage", TensorProto.FLOAT),
    )
    (garbage / "1").mkdir()
    (garbage / "1" / "model.onnx").write_bytes(b"this is not an ONNX model\x00\xff" * 10)
    models.write_model(
        repo,
        "broken_python",
        fp32_identity,
        models.identity_config("broken_python", TensorProto.FLOAT).replace(
            'backend: "onnxruntime"', 'backend: "python"'
        ),
    )
    for name, (dtype, dims, steps) in _BROKEN_ENSEMBLES.items():
        (repo / name / "1").mkdir(parents=True)
        models.write_model(repo, name, None, ensemble_config(name, dtype, dims, steps))
    return repo


PYTHON_MODES = ("process", "in-process")  # where a python model runs: its own process, or ours
IN_PROCESS = 'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'


def place_python_models(repo: Path, mode: str) -> Path:
    """`repo` with every python model of it running in `mode` (one of PYTHON_MODES)."""
    assert mode in PYTHON_MODES
    if mode == "in-process":
        for config in repo.glob("*/config.pbtxt"):
            text = config.read_text(encoding="utf-8")
            if 'backend: "python"' in text:
                config.write_text(text + IN_PROCESS, encoding="utf-8")
    return repo


def ensemble_config(name: str, dtype: str, dims: int, steps: list[tuple[str, str, str]]) -> str:
    """An ensemble with input IN and output OUT (FP32 [16]); each step feeds a model's INPUT0
    and INPUT1 from one tensor and maps its OUTPUT0 to another."""
    text = "".join(
        f'{{ model_name: "{model}" model_version: -1 '
        f'input_map {{ key: "INPUT0" value: "{source}" }} '
        f'input_map {{ key: "INPUT1" value: "{source}" }} '
        f'output_map {{ key: "OUTPUT0" value: "{target}" }} }},'
        for source, target, model in steps
    )
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        f'input [ {{ name: "IN" data_type: {dtype} dims: [ {dims} ] }} ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        f"ensemble_scheduling {{ step [ {text.rstrip(',')} ] }}\n"
    )


def serve_command(repository: Path, *flags: str) -> list[str]:
    """`python -m server serve` on 127.0.0.1 with free ports (run from REPO_ROOT)."""
    return [
        sys.executable,
        "-m",
        "server",
        "serve",
        "--model-repository",
        str(repository),
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--http-port",
        "0",
        *flags,
    ]


def generate_stream(http_port: int, model: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events of one HTTP `generate_stream` request to a server on 127.0.0.1, in order."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v2/models/{model}/generate_stream",
        data=json.dumps(body).encode(),
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        return [
            json.loads(line[len(b"data: ") :])
            for line in answer.read().splitlines()
            if line.startswith(b"data: ")
        ]


def model_workers(server_pid: int) -> list[int]:
    """The pids of the server's python model worker processes."""
    found = []
    for child in child_pids(server_pid):
        with contextlib.suppress(FileNotFoundError):
            if b"_worker.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
    return found


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """Poll `condition` every 20 ms until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value on a Prometheus page; NaN when the page has no such sample."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = "^" + re.escape(f"{name}{{{wanted}}}" if wanted else name) + r" (\S+)$"
    found = re.findall(pattern, text, re.MULTILINE)
    return float(found[0]) if found else float("nan")


class ConvoyServer:
    """One `python -m server serve` process on free ports, its stderr in a log file."""

    def __init__(
        self,
        repository: Path,
        log_path: Path,
        *flags: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.repository = repository
        self.log_path = log_path
        self.flags = flags
        self.env = env  # the process's whole environment; None: this one's
        self.grpc_port = 0
        self.metrics_port = 0
        self.http_port = 0  # 0 while HTTP is off
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def metrics(self) -> str:
        """The Prometheus page, as the server serves it now."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as page:
            body: bytes = page.read()
        return body.decode()

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ConvoyServer:
        """Start the process and wait for its serving line; fail with the log otherwise."""
        command = serve_command(self.repository, *self.flags)
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env=None if self.env is None else dict(self.env),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = SERVING_LINE.search(self.log())
            if found:
                self.grpc_port = int(found.group(1))
                self.metrics_port = int(found.group(2) or 0)
                http = HTTP_PORT.search(self.log(), found.end())
                self.http_port = int(http.group(1)) if http else 0
                return self
            if self.process.poll() is not None:
                pytest.fail(
                    f"server exited with {self.process.returncode} before serving; log:\n"
                    + self.log()
                )
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"server did not log its serving line within {timeout_s} s; log:\n{self.log()}")

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """The exit code, once the process has exited; fails (and kills it) past the timeout."""
        assert self.process is not None
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"server did not exit within {timeout_s} s; log:\n{self.log()}")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then the exit code."""
        self.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


# The `start_server` fixture: start_server(repository, *flags) -> a started ConvoyServer.
StartServer = Callable[..., ConvoyServer]

# Wire data type -> the NumPy dtype tritonclient uses for it (BF16: ml_dtypes.bfloat16).
NUMPY_TYPES: dict[str, type | np.dtype] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "BYTES": np.object_,
}
UTF8_WORDS = ("", "a", "naïve", "日本語", "emoji 🚀", "nul\x00inside", "x" * 1000, "")


def sample_array(
    datatype: str, shape: tuple[int, ...], seed: int = 0, *, extremes: bool = True
) -> np.ndarray:
    """Seeded values of a wire data type; `extremes` puts min/max (ints) or 0, -0, inf, -inf and
    NaN (floats) first."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    dtype = np.dtype(NUMPY_TYPES[datatype])
    if datatype == "BYTES":
        words = [w.encode("utf-8") for w in UTF8_WORDS]
        values = np.array([words[i % len(words)] for i in range(count)], dtype=object)
    elif datatype == "BOOL":
        values = rng.integers(0, 2, size=count).astype(np.bool_)
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True)
        if extremes:
            values[: min(count, 2)] = [info.min, info.max][: min(count, 2)]
    else:
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3], dtype=np.float32)
        values = rng.standard_normal(count).astype(np.float32)
        if extremes:
            values[: min(count, len(special))] = special[: min(count, len(special))]
        values = values.astype(dtype)
    return values.reshape(shape)


def bits(array: np.ndarray) -> np.ndarray:
    """Fixed-size arrays as unsigned integers of the same width, to compare floats exactly."""
    if array.dtype == np.object_ or array.dtype == np.bool_:
        return array
    return array.view(f"u{array.dtype.itemsize}")


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    """A tritonclient input carrying `array` as raw contents (tritonclient's default)."""
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def http_input(
    name: str, array: np.ndarray, datatype: str, binary: bool = True
) -> httpclient.InferInput:
    """tritonclient.http's input carrying `array`, as binary data (its default) or as JSON."""
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def simple_inputs(
    batch: int, datatype: str = "FP32", seed: int = 0
) -> tuple[list[grpcclient.InferInput], np.ndarray, np.ndarray]:
    """Inputs of `simple` (or `simple_int32`) and the two arrays they carry."""
    a = sample_array(datatype, (batch, 16), seed, extremes=False)
    b = sample_array(datatype, (batch, 16), seed + 1, extremes=False)
    return [infer_input("INPUT0", a, datatype), infer_input("INPUT1", b, datatype)], a, b


SIMPLE_BYTES = 16 * 4  # one FP32 [1, 16] tensor of `simple`


def shm_inputs(client: Any, region: str, second_offset: int = SIMPLE_BYTES) -> list[Any]:
    """`simple`'s INPUT0 and INPUT1 ([1, 16] FP32) at offsets 0 and `second_offset` of a shared
    memory region; `client` is tritonclient.grpc or tritonclient.http (they take it alike)."""
    first = client.InferInput("INPUT0", [1, 16], "FP32")
    first.set_shared_memory(region, SIMPLE_BYTES)
    second = client.InferInput("INPUT1", [1, 16], "FP32")
    second.set_shared_memory(region, SIMPLE_BYTES, offset=second_offset)
    return [first, second]


def shm_outputs(client: Any, region: str, byte_size: int = SIMPLE_BYTES) -> list[Any]:
    """`simple`'s OUTPUT0 and OUTPUT1 written at offsets 0 and SIMPLE_BYTES of a region, with
    `byte_size` bytes given to each."""
    outputs = [client.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory(region, byte_size)
    outputs[1].set_shared_memory(region, byte_size, offset=SIMPLE_BYTES)
    return outputs


def raw_tensor(
    request: service_pb2.ModelInferRequest, name: str, datatype: str, shape: list[int]
) -> service_pb2.ModelInferRequest.InferInputTensor:
    """Append an input tensor (no data) to a protobuf request."""
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = name, datatype
    tensor.shape.extend(shape)
    return tensor
