"""A Triton config's `reshape` end to end: clients see the config's dims, the model file its own
shape, and requests of different batch sizes still batch together."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from e2e_support import StartServer, infer_input
from onnx import TensorProto

from scripts import models

CONFIG = """
name: "square"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
"""


async def _many(url: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    async with aioclient.InferenceServerClient(url) as triton:

        async def one(x: np.ndarray) -> np.ndarray:
            tensor = aioclient.InferInput("INPUT0", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            return (await triton.infer("square", [tensor])).as_numpy("OUTPUT0")

        return await asyncio.gather(*(one(x) for x in arrays))


def test_clients_see_the_configs_dims_and_the_model_its_own_shape(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "square", models.identity(TensorProto.FLOAT), CONFIG)  # [batch, 4]
    server = start_server(repo)
    with grpcclient.InferenceServerClient(server.url) as triton:
        metadata = triton.get_model_metadata("square", as_json=True)
        assert metadata["inputs"][0]["shape"] == ["-1", "2", "2"]
        x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
        result = triton.infer("square", [infer_input("INPUT0", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
        arrays = [np.full((1 + i % 3, 2, 2), float(i), np.float32) for i in range(12)]
        for x, y in zip(arrays, asyncio.run(_many(server.url, arrays)), strict=True):
            np.testing.assert_array_equal(y, x)
        stats = triton.get_inference_statistics("square", as_json=True)["model_stats"][0]
        assert int(stats["execution_count"]) < 13  # batched, across the reshape
