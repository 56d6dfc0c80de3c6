"""Dynamic batching and instance groups end to end: real server, real client, real models.

One server serves several configurations of the same two ONNX files: `mlp` (fast, for
correctness under load) and `resnet18` (slow enough on CPU to fill queues deterministically).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from e2e_support import ConvoyServer
from tritonclient.utils import InferenceServerException

from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc as pb_grpc
from scripts import models

RESNET_DIMS = "dims: [3, 224, 224]"


def _resnet_config(name: str, max_batch_size: int, batching: str, instances: int = 1) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [ {{ name: "input" data_type: TYPE_FP32 {RESNET_DIMS} }} ]
output [ {{ name: "output" data_type: TYPE_FP32 dims: [1000] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{batching}
"""


def _mlp_config(name: str, batching: str) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 64
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [256] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [10] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{batching}
"""


CONFIGS = {
    "mlp_batched": (
        "mlp",
        _mlp_config("mlp_batched", "dynamic_batching { max_queue_delay_microseconds: 20000 }"),
    ),
    "mlp_unbatched": ("mlp", _mlp_config("mlp_unbatched", "")),
    # The adaptive delay, on by default: no parameter.
    "mlp_adaptive": (
        "mlp",
        _mlp_config("mlp_adaptive", "dynamic_batching { max_queue_delay_microseconds: 300000 }"),
    ),
    "resnet_small_queue": (
        "resnet",
        _resnet_config(
            "resnet_small_queue",
            1,
            "dynamic_batching { default_queue_policy { max_queue_size: 2 } }",
        ),
    ),
    "resnet_reject": (
        "resnet",
        _resnet_config(
            "resnet_reject",
            1,
            "dynamic_batching { default_queue_policy { default_timeout_microseconds: 5000 } }",
        ),
    ),
    "resnet_delay": (
        "resnet",
        _resnet_config(
            "resnet_delay",
            1,
            "dynamic_batching { default_queue_policy { timeout_action: DELAY "
            "default_timeout_microseconds: 1000 } }",
        ),
    ),
    "resnet_override": (
        "resnet",
        _resnet_config(
            "resnet_override",
            1,
            "dynamic_batching { default_queue_policy { allow_timeout_override: true } }",
        ),
    ),
    "resnet_priority": (
        "resnet",
        _resnet_config(
            "resnet_priority",
            1,
            "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
        ),
    ),
    "resnet_ordered": (
        "resnet",
        _resnet_config("resnet_ordered", 8, "dynamic_batching { preserve_ordering: true }", 2),
    ),
    "resnet_unordered": (
        "resnet",
        _resnet_config("resnet_unordered", 8, "dynamic_batching { }", 2),
    ),
    "resnet_two": ("resnet", _resnet_config("resnet_two", 1, "", 2)),
}


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("onnx")
    files = {"mlp": root / "mlp.onnx", "resnet": root / "resnet.onnx"}
    onnx.save(models.mlp(), files["mlp"])
    onnx.save(models.resnet18(), files["resnet"])
    return files


@pytest.fixture(scope="module")
def server(
    onnx_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    repo = tmp_path_factory.mktemp("batching")
    for name, (kind, config) in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.onnx").symlink_to(onnx_files[kind])
    running = ConvoyServer(repo, tmp_path_factory.mktemp("log") / "server.log").start()
    try:
        yield running
        assert running.stop() == 0
    finally:
        running.kill()


@pytest.fixture
def client(server: ConvoyServer) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as opened:
        yield opened


def _stats(client: grpcclient.InferenceServerClient, model: str):  # type: ignore[no-untyped-def]
    return client.get_inference_statistics(model).model_stats[0]


def _image(batch: int = 1, seed: int = 0) -> list[grpcclient.InferInput]:
    array = np.random.default_rng(seed).standard_normal((batch, 3, 224, 224), np.float32)
    tensor = grpcclient.InferInput("input", list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return [tensor]


async def _gather(url: str, calls: list) -> list:  # type: ignore[type-arg]
    async with aioclient.InferenceServerClient(url) as aio:
        return await asyncio.gather(*(call(aio) for call in calls), return_exceptions=True)


def test_256_concurrent_mixed_batch_requests_each_get_their_own_answer(
    server: ConvoyServer, client: grpcclient.InferenceServerClient, onnx_files: dict[str, Path]
) -> None:
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((int(rng.integers(1, 5)), 256), np.float32) for _ in range(256)]
    session = ort.InferenceSession(str(onnx_files["mlp"]), providers=["CPUExecutionProvider"])
    expected = [session.run(None, {"INPUT": a})[0] for a in arrays]
    before = _stats(client, "mlp_batched")

    def call(array: np.ndarray):  # type: ignore[no-untyped-def]
        async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
            tensor = aioclient.InferInput("INPUT", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            return (await aio.infer("mlp_batched", [tensor])).as_numpy("OUTPUT")

        return run

    results = asyncio.run(_gather(server.url, [call(a) for a in arrays]))
    for got, want in zip(results, expected, strict=True):
        assert not isinstance(got, Exception), got
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    after = _stats(client, "mlp_batched")
    inferences = after.inference_count - before.inference_count
    executions = after.execution_count - before.execution_count
    assert inferences == sum(len(a) for a in arrays)
    assert executions < inferences
    assert any(s.batch_size > 4 for s in after.batch_stats)
    assert after.inference_stats.queue.count - before.inference_stats.queue.count == 256


def test_the_adaptive_delay_sends_clients_in_step_without_waiting_out_the_delay(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    """Four tritonclient clients, each sending its next request a little after its answer,
    against a 300 ms delay that no batch fills (max_batch_size 64): the first batch waits it out
    and reaches 4; the next ones are sent once their fourth request is in."""
    before = _stats(client, "mlp_adaptive")
    rounds = 6
    latencies: list[list[float]] = [[] for _ in range(4)]
    # Every client connected before any sends: the first batch must see all four first requests
    # within the delay, however long a loaded machine takes to open four channels.
    connected = threading.Barrier(4)

    def run(index: int) -> None:
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as own:
            tensor = grpcclient.InferInput("INPUT", [1, 256], "FP32")
            tensor.set_data_from_numpy(np.full((1, 256), index, np.float32))
            assert own.is_server_live()
            connected.wait(timeout=30)
            for _ in range(rounds):
                time.sleep(0.01 * index)
                start = time.monotonic()
                own.infer("mlp_adaptive", [tensor])
                latencies[index].append(time.monotonic() - start)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert latencies[0][0] >= 0.25  # the probe: Triton's wait
    assert max(max(mine[1:]) for mine in latencies) < 0.2
    after = _stats(client, "mlp_adaptive")
    assert after.inference_count - before.inference_count == 4 * rounds
    assert after.execution_count - before.execution_count == rounds


def test_without_dynamic_batching_each_request_runs_alone(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    array = np.ones((2, 256), np.float32)

    async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        tensor = aioclient.InferInput("INPUT", [2, 256], "FP32")
        tensor.set_data_from_numpy(array)
        return await aio.infer("mlp_unbatched", [tensor])

    results = asyncio.run(_gather(server.url, [run] * 40))
    assert not any(isinstance(r, Exception) for r in results)
    stats = _stats(client, "mlp_unbatched")
    assert stats.execution_count == 40
    assert stats.inference_count == 80
    assert [s.batch_size for s in stats.batch_stats] == [2]


def test_max_queue_size_refuses_fast_and_no_request_is_lost_or_answered_twice(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    before = _stats(client, "resnet_small_queue")
    timings: list[tuple[float, object]] = []

    async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        start = time.monotonic()
        try:
            result = await aio.infer("resnet_small_queue", _image())
        except InferenceServerException as exc:
            timings.append((time.monotonic() - start, exc))
            raise
        timings.append((time.monotonic() - start, result))
        return result

    results = asyncio.run(_gather(server.url, [run] * 24))
    refused = [r for r in results if isinstance(r, InferenceServerException)]
    served = [r for r in results if not isinstance(r, Exception)]
    assert len(refused) + len(served) == 24 == len(timings)
    assert refused and served
    for exc in refused:
        assert exc.status() == "StatusCode.UNAVAILABLE"
        assert "Exceeds maximum queue size" in exc.message()
    # Refusals come at once, not after waiting for a turn.
    slowest_refusal = max(t for t, r in timings if isinstance(r, InferenceServerException))
    slowest_success = max(t for t, r in timings if not isinstance(r, InferenceServerException))
    assert slowest_refusal < slowest_success
    after = _stats(client, "resnet_small_queue")
    assert after.inference_stats.success.count - before.inference_stats.success.count == len(served)
    assert after.inference_stats.fail.count - before.inference_stats.fail.count == len(refused)


def test_a_full_queue_says_when_to_retry(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    """A bare gRPC stub (its trailers in reach): each refusal of a full queue carries
    grpc-retry-pushback-ms, and those refused together are told different turns."""
    client.infer("resnet_small_queue", _image())  # one batch measured: a request's share known
    request = pb.ModelInferRequest(model_name="resnet_small_queue")
    request.inputs.add(name="input", datatype="FP32", shape=[1, 3, 224, 224])
    request.raw_input_contents.append(np.zeros((1, 3, 224, 224), np.float32).tobytes())

    async def hints() -> list[int]:
        told = []
        async with grpc.aio.insecure_channel(server.url) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            calls = [stub.ModelInfer(request, timeout=60) for _ in range(12)]
            for call in calls:
                try:
                    await call
                except grpc.aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode.UNAVAILABLE
                    assert "Exceeds maximum queue size" in (error.details() or "")
                    trailers = dict(error.trailing_metadata() or ())
                    told.append(int(trailers["grpc-retry-pushback-ms"]))
        return told

    told = asyncio.run(hints())
    assert len(told) >= 2, "12 at once against a queue of 2"
    assert min(told) >= 1 and max(told) > min(told)


def test_reject_timeout_answers_unavailable(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        return await aio.infer("resnet_reject", _image())

    results = asyncio.run(_gather(server.url, [run] * 6))
    expired = [r for r in results if isinstance(r, InferenceServerException)]
    assert expired, "some requests should wait past 5 ms behind a busy instance"
    assert all(e.status() == "StatusCode.UNAVAILABLE" for e in expired)
    assert all("Request timeout expired" in e.message() for e in expired)
    assert len(expired) < 6  # the first one ran


def test_delay_timeout_still_serves_every_request(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        return await aio.infer("resnet_delay", _image())

    results = asyncio.run(_gather(server.url, [run] * 6))
    assert not any(isinstance(r, Exception) for r in results)


def test_request_timeout_parameter_shortens_the_queue_timeout(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    async def patient(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        return await aio.infer("resnet_override", _image())

    async def hasty(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.01)  # eight patient ones hold the instance for far longer
        return await aio.infer("resnet_override", _image(), timeout=1000)

    results = asyncio.run(_gather(server.url, [patient] * 8 + [hasty]))
    assert not any(isinstance(r, Exception) for r in results[:8])
    assert isinstance(results[8], InferenceServerException)
    assert "Request timeout expired" in results[8].message()


def test_higher_priority_requests_overtake_queued_ones(server: ConvoyServer) -> None:
    finished: list[str] = []

    def call(tag: str, priority: int, delay_s: float):  # type: ignore[no-untyped-def]
        async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
            await asyncio.sleep(delay_s)
            await aio.infer("resnet_priority", _image(), priority=priority)
            finished.append(tag)

        return run

    calls = [call(f"low{i}", 0, 0.0) for i in range(5)] + [call("high", 1, 0.03)]
    results = asyncio.run(_gather(server.url, calls))
    assert not any(isinstance(r, Exception) for r in results)
    # "high" arrived last, behind queued low-priority requests, and still finished before some.
    assert finished.index("high") < len(finished) - 1


def _ordered_completion(server: ConvoyServer, model: str) -> list[str]:
    finished: list[str] = []

    def call(tag: str, batch: int, delay_s: float):  # type: ignore[no-untyped-def]
        async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
            await asyncio.sleep(delay_s)
            await aio.infer(model, _image(batch))
            finished.append(tag)

        return run

    results = asyncio.run(_gather(server.url, [call("big", 8, 0.0), call("small", 1, 0.1)]))
    assert not any(isinstance(r, Exception) for r in results)
    return finished


def test_preserve_ordering_answers_in_arrival_order(server: ConvoyServer) -> None:
    # Control: without preserve_ordering the small request, on the second instance, wins.
    assert _ordered_completion(server, "resnet_unordered") == ["small", "big"]
    assert _ordered_completion(server, "resnet_ordered") == ["big", "small"]


def test_two_instances_execute_at_the_same_time(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    async def run(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        return await aio.infer("resnet_two", _image())

    async def rounds() -> list[tuple[int, int]]:
        # Executions on one instance at a time can never add up to more time than passed, so
        # a round that shows more is proof; a round that does not (the client or a busy
        # machine kept the second instance idle) proves nothing, and another round runs.
        seen = []
        async with aioclient.InferenceServerClient(server.url) as aio:
            await run(aio)  # the connection made and both sessions warm before any clock runs
            await asyncio.gather(run(aio), run(aio))
            for _ in range(3):
                before = _stats(client, "resnet_two")
                start = time.monotonic_ns()
                results = await asyncio.gather(
                    *(run(aio) for _ in range(8)), return_exceptions=True
                )
                wall_ns = time.monotonic_ns() - start
                assert not any(isinstance(r, Exception) for r in results), results
                after = _stats(client, "resnet_two")
                assert after.execution_count - before.execution_count == 8
                compute_ns = (
                    after.inference_stats.compute_infer.ns - before.inference_stats.compute_infer.ns
                )
                seen.append((compute_ns, wall_ns))
                if compute_ns > wall_ns:
                    break
        return seen

    seen = asyncio.run(rounds())
    # Executions add up to more time than passed: they overlapped.
    assert seen[-1][0] > seen[-1][1], f"(compute ns, wall ns) per round: {seen}"


CANCELED = 'nv_inference_request_failure{model="resnet_priority",reason="CANCELED",version="1"}'


def _cancelled_count(server: ConvoyServer) -> float:
    for line in server.metrics().splitlines():
        if line.startswith(CANCELED + " "):
            return float(line.split()[-1])
    return 0.0


def test_a_cancelled_request_is_counted_and_its_neighbours_served(server: ConvoyServer) -> None:
    async def patient(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        return await aio.infer("resnet_priority", _image())

    async def impatient(aio: aioclient.InferenceServerClient):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.005)
        return await aio.infer("resnet_priority", _image(), client_timeout=0.02)

    # The impatient request's deadline passes while it waits behind the first three. On a busy
    # machine it can pass before the request reaches the queue (the server then never sees it
    # as a request to count), so a round that counts nothing runs again, up to three rounds;
    # the three patient requests must be served in every round.
    before = _cancelled_count(server)
    counted = 0.0
    for _ in range(3):
        results = asyncio.run(_gather(server.url, [patient, patient, patient, impatient]))
        assert not any(isinstance(r, Exception) for r in results[:3]), results
        if isinstance(results[3], InferenceServerException):
            assert "DEADLINE" in str(results[3].status()), results[3]
        deadline = time.monotonic() + 2
        while (counted := _cancelled_count(server) - before) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if counted:
            break
    assert counted == 1, f"CANCELED counted {counted} times"


def test_a_slow_model_never_stalls_a_fast_one_beside_it(server: ConvoyServer) -> None:
    """Batches that compute long stay on their instance's thread (backends.inline), so the
    event loop keeps answering a fast model while they run; the fast one itself runs inline."""
    mlp = np.ones((1, 256), np.float32)

    async def scenario() -> tuple[float, list[float]]:
        async with aioclient.InferenceServerClient(server.url) as aio:

            async def slow() -> float:
                start_s = time.monotonic()
                await aio.infer("resnet_unordered", _aio_image(8))
                return time.monotonic() - start_s

            # More batches of 8 than the rule measures before it may move a size inline.
            slow_s = min([await slow() for _ in range(10)])
            running = True

            async def keep_busy() -> None:
                while running:
                    await slow()

            busy = [asyncio.create_task(keep_busy()) for _ in range(2)]
            await asyncio.sleep(slow_s / 2)  # both instances are computing
            latencies = []
            for _ in range(30):
                tensor = aioclient.InferInput("INPUT", [1, 256], "FP32")
                tensor.set_data_from_numpy(mlp)
                start_s = time.monotonic()
                await aio.infer("mlp_unbatched", [tensor])
                latencies.append(time.monotonic() - start_s)
            running = False
            await asyncio.gather(*busy)
            return slow_s, latencies

    slow_s, latencies = asyncio.run(scenario())
    # Were a batch of the slow model run on the loop, the fast model's requests would wait for
    # it: half of them would take about half a slow batch or more.
    assert sorted(latencies)[len(latencies) // 2] < slow_s / 4, (slow_s, latencies)


def _aio_image(batch: int) -> list[aioclient.InferInput]:
    array = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), np.float32)
    tensor = aioclient.InferInput("input", list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return [tensor]
