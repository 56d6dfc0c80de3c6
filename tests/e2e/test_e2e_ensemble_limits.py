"""Ensemble limits (Triton 26.04 and 2.66): `max_inflight_requests` is one limit per step shared
by every request of the ensemble, so a fast step waits behind a slow one instead of piling up
tensors for it; a step whose queue is full fails its ensemble requests at once, with its error.
Over gRPC and HTTP, with the python steps in the server's process (the cheaper mode)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import models

ADD_ONE = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.delay_s = float(config["parameters"]["delay_s"]["string_value"])

    def execute(self, requests):
        time.sleep(self.delay_s)
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)
            ])
            for r in requests
        ]
"""
LIMIT = 2  # max_inflight_requests of the pipeline
REQUESTS = 8
SLOW_S = 0.15
QUEUED_S = 0.6
IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)
UNAVAILABLE = {"grpc": "StatusCode.UNAVAILABLE", "http": "503"}


def _step(name: str, delay_s: float, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 1\n{IO}'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        f'parameters {{ key: "delay_s" value: {{ string_value: "{delay_s}" }} }}\n{extra}'
    )


def _ensemble(repo: Path, name: str, steps: list[str], extra: str = "") -> None:
    tensors = ["X", *(f"t{i}" for i in range(len(steps) - 1)), "Y"]
    text = ", ".join(
        f'{{ model_name: "{model}" model_version: -1 input_map {{ key: "X" value: "{source}" }} '
        f'output_map {{ key: "Y" value: "{target}" }} }}'
        for model, source, target in zip(steps, tensors, tensors[1:], strict=False)
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 1\n{IO}'
        f"ensemble_scheduling {{ {extra} step [ {text} ] }}\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    repo = tmp_path_factory.mktemp("ensemble-limits")
    models.write_python_model(repo, "fast", ADD_ONE, _step("fast", 0.0))
    models.write_python_model(repo, "slow", ADD_ONE, _step("slow", SLOW_S))
    _ensemble(repo, "pipeline", ["fast", "slow"], f"max_inflight_requests: {LIMIT}")
    # One request executing and one queued at most; the others are refused.
    queue = "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
    models.write_python_model(repo, "narrow", ADD_ONE, _step("narrow", QUEUED_S, queue))
    _ensemble(repo, "through_narrow", ["fast", "narrow"], "max_inflight_requests: 4")
    log = tmp_path_factory.mktemp("log") / "server.log"
    started = ConvoyServer(place_python_models(repo, "in-process"), log).start()
    try:
        yield started
        assert started.stop() == 0, started.log()
    finally:
        started.kill()


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _client(protocol: str, server: ConvoyServer) -> Any:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.url)
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def _infer(protocol: str, server: ConvoyServer, model: str, value: float) -> Callable[[], Any]:
    def call() -> Any:
        api = grpcclient if protocol == "grpc" else httpclient
        x = np.full((1, 4), value, np.float32)
        tensor = api.InferInput("X", [1, 4], "FP32")
        tensor.set_data_from_numpy(x)
        with contextlib.closing(_client(protocol, server)) as client:
            return client.infer(model, [tensor]).as_numpy("Y")

    return call


def _successes(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_a_slow_step_holds_back_the_fast_step_before_it(
    protocol: str, server: ConvoyServer
) -> None:
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as watcher:
        fast_before, slow_before = _successes(watcher, "fast"), _successes(watcher, "slow")
        ahead = []  # answers of the fast step not yet taken by the slow one
        with ThreadPoolExecutor(REQUESTS) as pool:
            calls = [pool.submit(_infer(protocol, server, "pipeline", i)) for i in range(REQUESTS)]
            while not all(call.done() for call in calls):
                fast = _successes(watcher, "fast") - fast_before
                slow = _successes(watcher, "slow") - slow_before
                ahead.append(fast - slow)
                time.sleep(0.02)
            answers = [call.result() for call in calls]
    for i, y in enumerate(answers):
        np.testing.assert_array_equal(y, np.full((1, 4), i + 2.0, np.float32))
    # At most LIMIT requests in the slow step (running or queued) and LIMIT holding the fast
    # step's slot with its answer; without the limit all REQUESTS would be through at once.
    assert max(ahead) <= 2 * LIMIT, f"the fast step ran ahead by {max(ahead)}: {ahead}"
    assert len(ahead) > 3  # the pipeline was watched while it ran (8 x 0.15 s in turn)


def test_a_full_step_queue_fails_the_ensemble_request_at_once(
    protocol: str, server: ConvoyServer
) -> None:
    outcomes: list[tuple[float, Any]] = []

    def timed(call: Callable[[], Any]) -> tuple[float, Any]:
        start_s = time.monotonic()
        try:
            result: Any = call()
        except InferenceServerException as error:
            result = error
        return time.monotonic() - start_s, result

    with ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(timed, _infer(protocol, server, "through_narrow", i)) for i in range(4)
        ]
        outcomes = [future.result() for future in futures]
    refused = [(s, r) for s, r in outcomes if isinstance(r, InferenceServerException)]
    served = [(s, r) for s, r in outcomes if not isinstance(r, InferenceServerException)]
    assert refused and served, outcomes
    for elapsed_s, error in refused:
        assert "Exceeds maximum queue size" in str(error.message())
        assert str(error.status()) == UNAVAILABLE[protocol]
        assert elapsed_s < QUEUED_S, f"a refusal took {elapsed_s:.2f} s"
    # The step is not stuck: the next request through it is served.
    np.testing.assert_array_equal(
        _infer(protocol, server, "through_narrow", 5.0)(), np.full((1, 4), 7.0, np.float32)
    )
