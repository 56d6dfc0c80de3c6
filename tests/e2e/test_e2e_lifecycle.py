"""Servers of their own: strict readiness, graceful shutdown with requests in flight, and the gRPC
message size limit (plus the largest request the shared server must take by default)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, StartServer, infer_input, metric, simple_inputs
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

EXIT_TIMEOUT_S = 20
IN_FLIGHT = 8
IN_FLIGHT_BATCH = 8  # 8 requests of 8 images: seconds of resnet18 work on one CPU instance


def _images(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 224, 224), dtype=np.float32)


def _resnet18(client: grpcclient.InferenceServerClient, images: np.ndarray) -> np.ndarray:
    result = client.infer("resnet18", [infer_input("input", images, "FP32")])
    scores: np.ndarray = result.as_numpy("output")
    return scores


def _health(url: str) -> int:
    with grpc.insecure_channel(url) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    return int(answer.status)


def _received(server: ConvoyServer, model: str) -> float:
    """Requests the model has taken so far: answered, or queued and executing."""
    page, labels = server.metrics(), {"model": model, "version": "1"}
    answered = metric(page, "nv_inference_request_success", **labels)
    return answered + metric(page, "convoy_inference_inflight_requests", **labels)


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_strict_readiness_is_the_default(
    start_server: StartServer, subset_repository: Callable[..., Path]
) -> None:
    server = start_server(subset_repository("simple", "broken_garbage"))
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.is_server_live()
        assert not client.is_server_ready()
        assert _health(server.url) == health_pb2.HealthCheckResponse.NOT_SERVING
        # The healthy model still serves.
        assert client.is_model_ready("simple")
        inputs, a, b = simple_inputs(1)
        np.testing.assert_allclose(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)
    server.send_signal(signal.SIGINT)  # SIGINT stops as gracefully as SIGTERM
    assert server.wait() == 0


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(
    start_server: StartServer, subset_repository: Callable[..., Path]
) -> None:
    server = start_server(
        subset_repository("resnet18", "simple"), "--exit-timeout-secs", str(EXIT_TIMEOUT_S)
    )
    client = grpcclient.InferenceServerClient(server.url)
    assert client.is_server_ready()  # strict readiness, and every model loaded
    assert _health(server.url) == health_pb2.HealthCheckResponse.SERVING
    batches = [_images(IN_FLIGHT_BATCH, seed) for seed in range(IN_FLIGHT)]
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        in_flight: list[Future[np.ndarray]] = [
            pool.submit(_resnet18, client, images) for images in batches
        ]
        # Every request in the server's hands (not still on the wire) before the signal: the
        # work takes seconds, and a request that reaches the server after it is refused.
        assert _wait_until(lambda: _received(server, "resnet18") == IN_FLIGHT, timeout_s=10.0)
        assert not all(f.done() for f in in_flight), "resnet18 finished before the signal"
        server.send_signal(signal.SIGTERM)
        signalled = time.monotonic()

        assert _wait_until(lambda: not client.is_server_ready(), timeout_s=5.0)
        assert not client.is_model_ready("resnet18")
        inputs, _, _ = simple_inputs(1)
        with pytest.raises(InferenceServerException) as late:
            client.infer("simple", inputs)
        draining = not all(f.done() for f in in_flight)
        assert late.value.status() == "StatusCode.UNAVAILABLE"
        assert draining, "the in-flight requests finished before the late request was refused"

        for future in in_flight:
            scores = future.result(timeout=EXIT_TIMEOUT_S)
            assert scores.shape == (IN_FLIGHT_BATCH, 1000)
            assert np.isfinite(scores).all()
    assert server.wait(EXIT_TIMEOUT_S) == 0
    assert time.monotonic() - signalled < EXIT_TIMEOUT_S
    # Once the process is gone the port refuses: still UNAVAILABLE to a gRPC client.
    with pytest.raises(InferenceServerException) as gone:
        client.infer("simple", inputs)
    assert gone.value.status() == "StatusCode.UNAVAILABLE"
    client.close()


def test_health_check_is_not_serving_during_the_drain(
    start_server: StartServer, subset_repository: Callable[..., Path]
) -> None:
    server = start_server(subset_repository("resnet18"), "--exit-timeout-secs", str(EXIT_TIMEOUT_S))
    client = grpcclient.InferenceServerClient(server.url)
    # A draining server refuses new connections: the health check's is opened before.
    channel = grpc.insecure_channel(server.url)
    health = health_pb2_grpc.HealthStub(channel)
    assert (
        health.Check(health_pb2.HealthCheckRequest()).status
        == health_pb2.HealthCheckResponse.SERVING
    )
    batches = [_images(IN_FLIGHT_BATCH, seed) for seed in range(IN_FLIGHT)]
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        in_flight = [pool.submit(_resnet18, client, images) for images in batches]
        # The work in the server's hands before the signal: a request still on the wire is
        # refused, and with nothing left to drain the server (its workers too) would be gone.
        assert _wait_until(lambda: _received(server, "resnet18") == IN_FLIGHT, timeout_s=10.0)
        server.send_signal(signal.SIGTERM)
        assert _wait_until(lambda: not client.is_server_ready(), timeout_s=5.0)
        status = health.Check(health_pb2.HealthCheckRequest()).status
        assert not all(f.done() for f in in_flight), "the work finished before the check"
        for future in in_flight:
            future.result(timeout=EXIT_TIMEOUT_S)
    client.close()
    channel.close()
    assert server.wait() == 0
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_batch_of_32_images_fits_the_default_message_limit(
    client: grpcclient.InferenceServerClient,
) -> None:
    images = _images(32, seed=3)  # 19 MiB of FP32
    assert images.nbytes > 16 * 1024 * 1024
    scores = _resnet18(client, images)
    assert scores.shape == (32, 1000)
    np.testing.assert_allclose(scores[5:6], _resnet18(client, images[5:6]), rtol=1e-4, atol=1e-4)


def test_a_message_over_the_limit_is_resource_exhausted(
    start_server: StartServer, subset_repository: Callable[..., Path]
) -> None:
    server = start_server(
        subset_repository("resnet18", "simple"),
        "--grpc-max-message-bytes",
        "1000000",
        "--allow-metrics",
        "false",
    )
    assert server.metrics_port == 0  # no metrics endpoint in the serving line
    assert "metrics on" not in server.log()
    with grpcclient.InferenceServerClient(server.url) as client:
        with pytest.raises(InferenceServerException) as error:
            _resnet18(client, _images(2))  # 1.2 MB
        assert error.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        # The server is still up and serves what fits.
        assert client.is_server_live()
        assert _resnet18(client, _images(1)).shape == (1, 1000)
    assert server.stop() == 0
