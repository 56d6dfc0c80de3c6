"""Serving to the caller's time: deadlines honoured in the queue (a gRPC deadline, the `timeout`
parameter over gRPC and HTTP, an ensemble's steps), in process and through front-end workers;
an expired request is never executed, and statistics and metrics count it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import IN_PROCESS, ConvoyServer, metric
from tritonclient.utils import InferenceServerException

from scripts import models

BLOCK_S = 0.4  # how long one execution of `slow` takes
DEADLINE_US = 100_000  # the expiring requests' deadline, well inside one execution

# Sleeps, then answers X as Y; one instance, so requests behind a running batch wait.
SLOW = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({BLOCK_S})
        outputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]) for y in outputs]
"""

_IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def _python_config(name: str, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{_IO}'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n"
        f"{IN_PROCESS}{extra}"
    )


ENSEMBLE = (
    'name: "slow_ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
    + _IO
    + 'ensemble_scheduling { step [ { model_name: "slow" model_version: -1 '
    'input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } ] }\n'
)


def write_repository(root: Path) -> Path:
    repo = root / "models"
    models.write_python_model(repo, "slow", SLOW, _python_config("slow"))
    (repo / "slow_ensemble" / "1").mkdir(parents=True)
    (repo / "slow_ensemble" / "config.pbtxt").write_text(ENSEMBLE, encoding="utf-8")
    return repo


@pytest.fixture(scope="module", params=["in-process", "workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("latency")
    flags = ("--frontend-workers", "2") if request.param == "workers" else ()
    convoy = ConvoyServer(write_repository(root), root / "server.log", *flags).start()
    try:
        yield convoy
        assert convoy.stop() == 0, convoy.log()
    finally:
        convoy.kill()


def _x(value: float) -> np.ndarray:
    return np.full((1, 1), value, np.float32)


def _grpc(server: ConvoyServer, model: str, value: float, **kwargs: Any) -> np.ndarray:
    with grpcclient.InferenceServerClient(server.url) as client:
        tensor = grpcclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(_x(value))
        result = client.infer(model, [tensor], **kwargs)
        return result.as_numpy("Y")  # type: ignore[no-any-return]


def _http(server: ConvoyServer, model: str, value: float, **kwargs: Any) -> np.ndarray:
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        tensor = httpclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(_x(value))
        result = client.infer(model, [tensor], **kwargs)
        return result.as_numpy("Y")  # type: ignore[no-any-return]


def _executions(server: ConvoyServer, model: str) -> tuple[int, int]:
    """(execution_count, inference_count) of the model's statistics."""
    with grpcclient.InferenceServerClient(server.url) as client:
        stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("execution_count", 0)), int(stats.get("inference_count", 0))


def _expired(server: ConvoyServer, model: str) -> float:
    return metric(server.metrics(), "convoy_inference_deadline_exceeded", model=model, version="1")


def _behind_a_running_batch(
    server: ConvoyServer, calls: list[Callable[[], np.ndarray]]
) -> list[Future[np.ndarray]]:
    """Start a request that occupies `slow`'s instance, then the calls while it runs."""
    pool = ThreadPoolExecutor(len(calls) + 1)
    blocker = pool.submit(_grpc, server, "slow", 1.0)
    time.sleep(BLOCK_S / 4)
    futures = [pool.submit(call) for call in calls]
    np.testing.assert_array_equal(blocker.result(10), _x(1.0))
    pool.shutdown(wait=True)
    return futures


def _error_of(future: Future[np.ndarray]) -> InferenceServerException:
    error = future.exception(10)
    assert isinstance(error, InferenceServerException), error
    return error


def test_expired_requests_are_never_executed_whichever_way_their_deadline_came(
    server: ConvoyServer,
) -> None:
    before_runs, before_inferences = _executions(server, "slow")
    before_expired = _expired(server, "slow")
    futures = _behind_a_running_batch(
        server,
        [
            lambda: _grpc(server, "slow", 2.0, client_timeout=DEADLINE_US / 1e6),
            lambda: _grpc(server, "slow", 3.0, timeout=DEADLINE_US),
            lambda: _http(server, "slow", 4.0, timeout=DEADLINE_US),
            lambda: _grpc(server, "slow", 5.0),  # no deadline: it runs next
        ],
    )
    deadline, grpc_timeout, http_timeout = (_error_of(f) for f in futures[:3])
    assert deadline.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert grpc_timeout.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert "deadline passed" in grpc_timeout.message() and "not executed" in grpc_timeout.message()
    assert http_timeout.status() == "503"
    assert "deadline passed" in http_timeout.message()
    np.testing.assert_array_equal(futures[3].result(10), _x(5.0))
    runs, inferences = _executions(server, "slow")
    assert (runs - before_runs, inferences - before_inferences) == (2, 2)  # blocker, then 5.0
    assert _expired(server, "slow") - before_expired == 3


def test_an_ensembles_deadline_holds_for_its_steps(server: ConvoyServer) -> None:
    before_runs, _ = _executions(server, "slow")
    futures = _behind_a_running_batch(
        server, [lambda: _grpc(server, "slow_ensemble", 2.0, timeout=DEADLINE_US)]
    )
    error = _error_of(futures[0])
    assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert "deadline passed" in error.message()
    assert _executions(server, "slow")[0] - before_runs == 1  # only the blocker ran


def test_a_request_within_its_deadline_is_answered(server: ConvoyServer) -> None:
    np.testing.assert_array_equal(_grpc(server, "slow", 6.0, timeout=5_000_000), _x(6.0))
    np.testing.assert_array_equal(_http(server, "slow", 7.0, timeout=5_000_000), _x(7.0))
    np.testing.assert_array_equal(_grpc(server, "slow", 8.0, client_timeout=5.0), _x(8.0))
