"""Ragged batching (`allow_ragged_batch`, `batch_input`, `batch_output`), as Triton's ONNX Runtime
backend does it: requests of different lengths share one execution, joined end to end, and each
gets its own answer back, over gRPC and HTTP; configs that cannot work fail their load, saying
why."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from e2e_support import StartServer, infer_input

from scripts import models

RAGGED = """
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }} ]
output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] }} ]
batch_input [ {{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS"
                data_type: {offsets} source_input: "INPUT" }} ]
batch_output [ {{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "DOUBLED"
                 source_input: "INPUT" }} ]
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
"""

# Configs that cannot work, and what their load says.
BROKEN = {
    # The model file takes INPUT with a batch dimension: a ragged batch has none.
    "ragged_two_dims": (
        models.mlp(),
        'name: "ragged_two_dims"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] allow_ragged_batch: true } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]\n',
        "must take it in one dimension",
    ),
    # The file's OFFSETS is INT32.
    "ragged_wrong_type": (
        models.ragged_sum(),
        RAGGED.format(name="ragged_wrong_type", offsets="TYPE_FP32"),
        "batch input 'OFFSETS' must be an input of the model file of type float32",
    ),
}


@pytest.fixture
def server_url(tmp_path: Path, start_server: StartServer) -> tuple[str, int]:
    repo = tmp_path / "repo"
    models.write_model(
        repo, "ragged", models.ragged_sum(), RAGGED.format(name="ragged", offsets="TYPE_INT32")
    )
    for name, (model, config, _) in BROKEN.items():
        models.write_model(repo, name, model, config)
    python = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return []
"""
    models.write_python_model(
        repo,
        "python_batch_input",
        python,
        'name: "python_batch_input"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "N" data_type: TYPE_INT32 '
        'source_input: "INPUT" } ]\n',
    )
    server = start_server(repo, "--strict-readiness", "false")
    return server.url, server.http_port


def _values(length: int, start: int) -> np.ndarray:
    return np.arange(start, start + length, dtype=np.float32).reshape(1, length)


def test_requests_of_different_lengths_share_a_batch_and_get_their_own_answers(
    server_url: tuple[str, int],
) -> None:
    url, http_port = server_url
    lengths = [3, 1, 7, 4, 2, 5]
    sent = [_values(length, 10 * index) for index, length in enumerate(lengths)]

    async def together() -> list[tuple[np.ndarray, np.ndarray]]:
        async with aioclient.InferenceServerClient(url) as aio:
            answers = await asyncio.gather(
                *(aio.infer("ragged", [infer_input("INPUT", x, "FP32")]) for x in sent)
            )
        return [(a.as_numpy("SUM"), a.as_numpy("DOUBLED")) for a in answers]

    for x, (total, doubled) in zip(sent, asyncio.run(together()), strict=True):
        assert total.tolist() == [[float(x.sum())]]
        np.testing.assert_array_equal(doubled, x * 2)  # scattered back in the request's shape
    with grpcclient.InferenceServerClient(url) as triton:
        stats = triton.get_inference_statistics("ragged").model_stats[0]
        assert stats.inference_stats.success.count == len(lengths)
        assert stats.execution_count < len(lengths)  # they met in batches
        for name, (_, _, reason) in BROKEN.items():
            entry = {m.name: m for m in triton.get_model_repository_index().models}[name]
            assert entry.state == "UNAVAILABLE" and reason in entry.reason, entry.reason
        entry = {m.name: m for m in triton.get_model_repository_index().models}
        assert "a Python model receives each request apart" in entry["python_batch_input"].reason

    with httpclient.InferenceServerClient(f"127.0.0.1:{http_port}") as http:
        x = _values(6, 1)
        tensor = httpclient.InferInput("INPUT", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        answer = http.infer("ragged", [tensor])
        assert answer.as_numpy("SUM").tolist() == [[21.0]]
        np.testing.assert_array_equal(answer.as_numpy("DOUBLED"), x * 2)
