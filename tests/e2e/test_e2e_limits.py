"""Limits that hold: an output asked for twice is refused (each copy would be answered again), and
after a burst of huge but valid requests every server process's memory returns near its level
before (private RSS read from /proc)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import CLIENT_MAX_MESSAGE_BYTES, ConvoyServer, StartServer
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from scripts import models

BURST = 12
ELEMENTS = 4 * 1024 * 1024  # 16 MiB of FP32 per request, 16 MiB back
SETTLED_MB = 160  # what the processes may keep after the burst, over their level before


def _repository(tmp_path: Path) -> Path:
    shape: list[str | int | None] = [models.BATCH_DIM, None]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "wide_identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", models.OPSET)], ir_version=models.IR_VERSION
    )
    config = (
        'name: "wide"\nbackend: "onnxruntime"\nmax_batch_size: 1\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    )
    repo = tmp_path / "limits"
    models.write_model(repo, "wide", model, config)
    return repo


def _rss_mb(pid: int) -> float:
    """A process's private resident memory: RSS without the shared pages, since the front-end
    workers' tensor arenas are shared memory of a fixed size that stays resident once used."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _processes(server: ConvoyServer) -> list[int]:
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _wide(values: np.ndarray) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", list(values.shape), "FP32")
    tensor.set_data_from_numpy(values)
    return [tensor]


def test_an_output_asked_for_twice_is_refused(tmp_path: Path, start_server: StartServer) -> None:
    server = start_server(_repository(tmp_path))
    with grpcclient.InferenceServerClient(server.url) as client:
        twice = [grpcclient.InferRequestedOutput("OUTPUT0") for _ in range(2)]
        with pytest.raises(InferenceServerException, match="requested more than once") as error:
            client.infer("wide", _wide(np.ones((1, 4), np.float32)), outputs=twice)
        assert "INVALID_ARGUMENT" in str(error.value.status())


def test_memory_returns_after_a_burst_of_huge_requests(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(_repository(tmp_path))
    options = [("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE_BYTES)]
    with grpcclient.InferenceServerClient(server.url, channel_args=options) as client:
        small = np.ones((1, 1024), np.float32)
        for _ in range(20):  # warm every path up first
            client.infer("wide", _wide(small))
        before = {pid: _rss_mb(pid) for pid in _processes(server)}
        values = np.random.default_rng(0).random((1, ELEMENTS), dtype=np.float32)
        for _ in range(BURST):
            answer = client.infer("wide", _wide(values))
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), values)
        for _ in range(20):
            client.infer("wide", _wide(small))
        after = {pid: _rss_mb(pid) for pid in _processes(server)}
    grown = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    burst_mb = BURST * ELEMENTS * 4 * 2 / 2**20
    assert sum(grown.values()) < SETTLED_MB, f"grew {grown} MB after {burst_mb:.0f} MB of traffic"
