"""The bare grpc.aio server answers what perf_analyzer asks, from the config it is given."""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "canned_grpc.py"
CONFIG = """\
name: "mlp_on"
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""


@pytest.fixture
def client(tmp_path: Path) -> Iterator[grpcclient.InferenceServerClient]:
    with _serving(tmp_path) as c:
        yield c


@contextlib.contextmanager
def _serving(tmp_path: Path, *options: str) -> Iterator[grpcclient.InferenceServerClient]:
    config = tmp_path / "config.pbtxt"
    config.write_text(CONFIG, encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(config), *options], stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        found = re.search(r"serving gRPC on 127\.0\.0\.1:(\d+)", process.stderr.readline())
        assert found, "the server did not start"
        with grpcclient.InferenceServerClient(f"127.0.0.1:{found[1]}") as c:
            yield c
    finally:
        process.terminate()
        process.wait()


def test_answers_metadata_config_and_statistics(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp_on")
    metadata = client.get_model_metadata("mlp_on")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT", "FP32", [-1, 256])
    ]
    config = client.get_model_config("mlp_on").config
    assert config.max_batch_size == 64
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert client.get_inference_statistics("mlp_on").model_stats[0].name == "mlp_on"


def test_infer_answers_a_canned_output_of_batch_one(
    client: grpcclient.InferenceServerClient,
) -> None:
    tensor = grpcclient.InferInput("INPUT", [1, 256], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 256), dtype=np.float32))
    output = client.infer("mlp_on", [tensor]).as_numpy("OUTPUT")
    assert output is not None and output.shape == (1, 10)
    assert not output.any()


def test_work_per_request_holds_each_answer_that_long(tmp_path: Path) -> None:
    tensor = grpcclient.InferInput("INPUT", [1, 256], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 256), dtype=np.float32))
    with _serving(tmp_path, "--work-us", "50000") as client:
        client.infer("mlp_on", [tensor])
        started_s = time.monotonic()
        client.infer("mlp_on", [tensor])
        assert time.monotonic() - started_s >= 0.05


def test_awaiting_a_batch_answers_every_waiting_call(tmp_path: Path) -> None:
    tensor = grpcclient.InferInput("INPUT", [1, 256], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 256), dtype=np.float32))
    with _serving(tmp_path, "--await-batch") as client:
        answers: queue.Queue[object] = queue.Queue()
        for _ in range(8):  # in flight together: one wake of the gate may answer several
            client.async_infer(
                "mlp_on", [tensor], lambda result, error: answers.put(error or result)
            )
        for _ in range(8):
            answer = answers.get(timeout=30)
            assert isinstance(answer, grpcclient.InferResult), answer
            output = answer.as_numpy("OUTPUT")
            assert output is not None and output.shape == (1, 10)
