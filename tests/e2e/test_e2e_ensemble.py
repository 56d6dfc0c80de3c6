"""Ensembles end to end: the seed's pipeline (preprocess in Python -> resnet18 -> label_head) as
one model, against its steps run one by one; concurrency, batching per step, lifecycle."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, StartServer, ensemble_config, infer_input
from PIL import Image
from tritonclient.utils import InferenceServerException

from backends import cuda_available
from scripts import models

IMAGES = 16  # distinct images; the concurrency test cycles through them


def encoded_image(seed: int) -> bytes:
    """A small seeded RGB image, PNG for even seeds and JPEG for odd ones."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(48 + seed, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG" if seed % 2 == 0 else "JPEG")
    return buffer.getvalue()


def image_input(data: bytes) -> grpcclient.InferInput:
    return infer_input("IMAGE", np.array([[data]], dtype=object), "BYTES")


def step_by_step(client: grpcclient.InferenceServerClient, data: bytes) -> tuple[int, np.ndarray]:
    """The pipeline run by hand: three calls, each model on its own."""
    pixels = client.infer("preprocess", [image_input(data)]).as_numpy("PIXELS")
    logits = client.infer("resnet18", [infer_input("input", pixels, "FP32")]).as_numpy("output")
    label = client.infer("label_head", [infer_input("LOGITS", logits, "FP32")]).as_numpy("LABEL")
    return int(label.ravel()[0]), logits


def test_the_pipeline_answers_as_its_steps_run_one_by_one(
    client: grpcclient.InferenceServerClient,
) -> None:
    for seed in (0, 1):  # a PNG and a JPEG
        data = encoded_image(seed)
        result = client.infer("classify", [image_input(data)])
        label, logits = step_by_step(client, data)
        assert result.as_numpy("LABEL").dtype == np.int64
        assert result.as_numpy("LABEL").tolist() == [[label]]
        np.testing.assert_allclose(result.as_numpy("LOGITS"), logits, rtol=1e-5, atol=1e-5)
    metadata = client.get_model_metadata("classify", as_json=True)
    assert metadata["platform"] == "ensemble"


def _batched_executions(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return sum(
        int(b["compute_infer"]["count"])
        for b in stats.get("batch_stats", [])
        if int(b["batch_size"]) > 1
    )


async def _classify_concurrently(url: str, payloads: list[bytes]) -> list[np.ndarray]:
    async with aioclient.InferenceServerClient(url) as triton:

        async def one(data: bytes) -> np.ndarray:
            tensor = aioclient.InferInput("IMAGE", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[data]], dtype=object))
            return (await triton.infer("classify", [tensor])).as_numpy("LOGITS")

        return await asyncio.gather(*(one(data) for data in payloads))


def test_128_concurrent_ensemble_requests_each_get_their_own_answer_batched_per_step(
    client: grpcclient.InferenceServerClient, convoy: ConvoyServer
) -> None:
    images = [encoded_image(seed) for seed in range(IMAGES)]
    expected = [step_by_step(client, data)[1] for data in images]
    before = {m: _batched_executions(client, m) for m in ("preprocess", "resnet18")}
    count_before = client.get_inference_statistics("classify", as_json=True)["model_stats"][0]
    payloads = [images[i % IMAGES] for i in range(128)]
    answers = asyncio.run(_classify_concurrently(convoy.url, payloads))
    for i, logits in enumerate(answers):
        np.testing.assert_allclose(logits, expected[i % IMAGES], rtol=1e-5, atol=1e-5)
    for model in ("preprocess", "resnet18"):
        assert _batched_executions(client, model) > before[model], f"{model} never batched"
    count_after = client.get_inference_statistics("classify", as_json=True)["model_stats"][0]
    done = int(count_after["inference_count"]) - int(count_before.get("inference_count", 0))
    assert done == 128
    # Prometheus counts the ensemble and each of its steps.
    metrics = convoy.metrics()
    for model in ("classify", "preprocess", "resnet18", "label_head"):
        line = f'nv_inference_request_success{{model="{model}",version="1"}}'
        assert line in metrics, model


def test_an_unreadable_image_fails_its_request_with_the_models_message_and_code(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException, match="not a readable JPEG or PNG") as raised:
        client.infer("classify", [image_input(b"definitely not an image")])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"  # the step's TritonError code
    assert client.infer("classify", [image_input(encoded_image(3))]).as_numpy("LABEL") is not None


def _double(tmp_path: Path) -> Path:
    """`simple` and an ensemble that runs it twice: (a+b, a-b) -> (2a, 2b)."""
    repo = tmp_path / "repo"
    models.write_model(
        repo,
        "simple",
        models.simple(),
        'name: "simple"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n',
    )
    (repo / "double" / "1").mkdir(parents=True)
    (repo / "double" / "config.pbtxt").write_text(
        'name: "double"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "B" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "TWO_A" data_type: TYPE_FP32 dims: [ 16 ] },'
        '{ name: "TWO_B" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        "ensemble_scheduling { step [\n"
        '{ model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "A" } '
        'input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "sum" } '
        'output_map { key: "OUTPUT1" value: "diff" } },\n'
        '{ model_name: "simple" model_version: 1 input_map { key: "INPUT0" value: "sum" } '
        'input_map { key: "INPUT1" value: "diff" } output_map { key: "OUTPUT0" value: "TWO_A" } '
        'output_map { key: "OUTPUT1" value: "TWO_B" } } ] }\n',
        encoding="utf-8",
    )
    return repo


def test_loading_an_ensemble_loads_its_composing_models_and_unload_dependents_follows(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(_double(tmp_path), "--model-control-mode", "explicit")
    with grpcclient.InferenceServerClient(server.url) as triton:
        assert not triton.is_model_ready("simple")
        triton.load_model("double")
        assert triton.is_model_ready("simple") and triton.is_model_ready("double")
        a = np.arange(32, dtype=np.float32).reshape(2, 16)
        b = np.ones((2, 16), np.float32)
        result = triton.infer("double", [infer_input("A", a, "FP32"), infer_input("B", b, "FP32")])
        np.testing.assert_allclose(result.as_numpy("TWO_A"), 2 * a)
        np.testing.assert_allclose(result.as_numpy("TWO_B"), 2 * b)
        simple = triton.get_inference_statistics("simple", as_json=True)["model_stats"][0]
        assert int(simple["inference_count"]) == 4  # two steps of batch 2
        triton.unload_model("simple", unload_dependents=True)
        assert not triton.is_model_ready("double")
        with pytest.raises(InferenceServerException, match="double"):
            triton.infer("double", [infer_input("A", a, "FP32"), infer_input("B", b, "FP32")])
        # The same over HTTP/REST.
        triton.load_model("double")
        with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as rest:
            rest.unload_model("simple", unload_dependents=True)
        assert not triton.is_model_ready("double") and not triton.is_model_ready("simple")


def test_an_ensemble_whose_step_model_is_gone_fails_clearly_and_recovers(
    tmp_path: Path, start_server: StartServer
) -> None:
    server = start_server(_double(tmp_path), "--model-control-mode", "explicit")
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.load_model("double")
        triton.unload_model("simple")
        a = np.zeros((1, 16), np.float32)
        inputs = [infer_input("A", a, "FP32"), infer_input("B", a, "FP32")]
        with pytest.raises(InferenceServerException, match="'simple'") as error:
            triton.infer("double", inputs)
        assert "UNAVAILABLE" in str(error.value.status())
        triton.load_model("simple")
        assert triton.infer("double", inputs).as_numpy("TWO_A").shape == (1, 16)


def test_a_broken_ensemble_is_a_clear_load_error_through_the_api(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = _double(tmp_path)
    (repo / "loop" / "1").mkdir(parents=True)
    steps = [("b", "OUT", "simple"), ("OUT", "b", "simple")]
    (repo / "loop" / "config.pbtxt").write_text(ensemble_config("loop", "TYPE_FP32", 16, steps))
    server = start_server(repo, "--model-control-mode", "explicit")
    with grpcclient.InferenceServerClient(server.url) as triton:
        with pytest.raises(InferenceServerException, match="a cycle") as error:
            triton.load_model("loop")
        assert "INVALID_ARGUMENT" in str(error.value.status())
        assert triton.is_model_ready("simple")  # its composing model loaded and kept serving


def _simple_on(repo: Path, name: str, kind: str) -> None:
    models.write_model(
        repo,
        name,
        models.simple(),
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
        f"instance_group [ {{ count: 2 kind: {kind} }} ]\n",
    )


@pytest.mark.skipif(not cuda_available(), reason="needs a GPU, onnxruntime-gpu and CuPy")
@pytest.mark.parametrize("second", ["KIND_GPU", "KIND_CPU"])
def test_an_intermediate_between_gpu_steps_stays_on_the_device_and_still_feeds_a_cpu_step(
    tmp_path: Path, start_server: StartServer, second: str
) -> None:
    # IN -> first (GPU): OUTPUT0 = IN + IN -> "mid" -> second: OUTPUT0 = mid + mid -> OUT. With
    # a GPU consumer "mid" is handed over as a device array; with a CPU one it comes back first.
    repo = tmp_path / "repo"
    _simple_on(repo, "first", "KIND_GPU")
    _simple_on(repo, "second", second)
    (repo / "chain" / "1").mkdir(parents=True)
    steps = [("IN", "mid", "first"), ("mid", "OUT", "second")]
    (repo / "chain" / "config.pbtxt").write_text(ensemble_config("chain", "TYPE_FP32", 16, steps))
    server = start_server(repo)

    async def run_all() -> list[np.ndarray]:
        async with aioclient.InferenceServerClient(server.url) as client:
            results = await asyncio.gather(
                *(client.infer("chain", [infer_input("IN", _rows(i), "FP32")]) for i in range(64))
            )
        return [result.as_numpy("OUT") for result in results]

    for index, answer in enumerate(asyncio.run(run_all())):
        np.testing.assert_array_equal(answer, 4 * _rows(index))
    with grpcclient.InferenceServerClient(server.url) as triton:
        for model in ("first", "second"):
            stats = triton.get_inference_statistics(model, as_json=True)["model_stats"][0]
            assert int(stats["inference_count"]) == sum(len(_rows(i)) for i in range(64))


def _rows(seed: int) -> np.ndarray:
    """1 to 3 rows of 16 distinct values, different per seed."""
    return np.arange(16 * (1 + seed % 3), dtype=np.float32).reshape(-1, 16) + seed
