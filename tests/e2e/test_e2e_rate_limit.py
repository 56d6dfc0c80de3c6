"""The rate limiter (`--rate-limit execution_count`) over real model instances: two models that
share one copy of a resource never execute at once (shown from the intervals each execution
records), a model with its own resource runs beside them, priorities shift the share of
executions under contention, and an explicit count below a model's need refuses its load."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, infer_input, metric

from scripts import models

# Each execution sleeps a little and appends "<model> <start> <end>" to the log its config names.
RECORDER = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_name"]
        self.log = json.loads(args["model_config"])["parameters"]["log"]["string_value"]

    def execute(self, requests):
        start = time.monotonic()
        time.sleep(0.03)
        end = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"{self.name} {start} {end}\\n")
        outputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]) for y in outputs]
"""

# (model, rate_limiter of its one instance)
MODELS = {
    "shared_a": "resources [ { name: 'R' count: 1 } ]",
    "shared_b": "resources [ { name: 'R' count: 1 } ]",
    "own": "resources [ { name: 'S' count: 1 } ]",
    "first": "resources [ { name: 'P' count: 1 } ] priority: 1",
    "second": "resources [ { name: 'P' count: 1 } ] priority: 3",
    "greedy": "resources [ { name: 'BIG' count: 2 } ]",  # more than --rate-limit-resource gives
}


def _config(name: str, limiter: str, log: Path) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        f"instance_group [ {{ count: 1 kind: KIND_CPU rate_limiter {{ {limiter} }} }} ]\n"
        f'parameters {{ key: "log" value {{ string_value: "{log}" }} }}\n'
    )


@pytest.fixture(scope="module")
def limited(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ConvoyServer, Path]]:
    root = tmp_path_factory.mktemp("rate_limit")
    log = root / "executions.log"
    for name, limiter in MODELS.items():
        models.write_python_model(root / "models", name, RECORDER, _config(name, limiter, log))
    flags = ["--rate-limit", "execution_count", "--rate-limit-resource", "BIG:1"]
    server = ConvoyServer(root / "models", root / "server.log", *flags).start()
    try:
        yield server, log
        assert server.stop() == 0, server.log()
    finally:
        server.kill()


def _hammer(url: str, counts: dict[str, int]) -> None:
    """`counts[model]` requests to each model, all at once (one client thread per request)."""

    def one(model: str) -> None:
        with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
            x = np.ones(1, np.float32)
            np.testing.assert_array_equal(
                client.infer(model, [infer_input("X", x, "FP32")]).as_numpy("Y"), x
            )

    threads = [
        threading.Thread(target=one, args=(model,))
        for model, count in counts.items()
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _intervals(log: Path, names: set[str]) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(name, float(start), float(end)) for name, start, end in rows if name in names]


def _overlap(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_models_sharing_one_copy_never_overlap_and_one_with_its_own_runs_beside(
    limited: tuple[ConvoyServer, Path],
) -> None:
    server, log = limited
    _hammer(server.url, {"shared_a": 8, "shared_b": 8, "own": 8})
    runs = _intervals(log, {"shared_a", "shared_b", "own"})
    shared = [run for run in runs if run[0] != "own"]
    assert len(shared) >= 2 and len([r for r in runs if r[0] == "own"]) >= 1
    for i, a in enumerate(shared):
        for b in shared[i + 1 :]:
            assert not _overlap(a, b), (a, b)
    assert any(_overlap(own, other) for own in runs if own[0] == "own" for other in shared)


def test_priorities_shift_the_share_of_executions_under_contention(
    limited: tuple[ConvoyServer, Path],
) -> None:
    server, log = limited
    before = len(_intervals(log, {"first", "second"}))
    _hammer(server.url, {"first": 24, "second": 24})
    runs = _intervals(log, {"first", "second"})[before:]
    # While both had work queued (the first 24 executions), priority 1 ran about 3x priority 3.
    contended = [name for name, _, _ in sorted(runs, key=lambda r: r[1])[:24]]
    first, second = contended.count("first"), contended.count("second")
    assert second >= 1 and first / second >= 2, (first, second)
    text = server.metrics()
    waited = metric(text, "convoy_rate_limiter_wait_duration_us", model="second", version="1")
    assert waited > 0
    assert metric(text, "convoy_rate_limiter_waits", model="second", version="1") >= 1


def test_an_explicit_count_below_a_need_refuses_the_load(
    limited: tuple[ConvoyServer, Path],
) -> None:
    server, _ = limited
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["greedy"].state == "UNAVAILABLE"
    assert (
        "resource 'BIG' (device -1): the instance needs 2, but --rate-limit-resource gives 1"
        in (index["greedy"].reason)
    )
    assert index["first"].state == "READY"


def test_the_wait_shows_in_queue_time(limited: tuple[ConvoyServer, Path]) -> None:
    server, _ = limited
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        stats = client.get_inference_statistics("shared_b").model_stats[0].inference_stats
    waited_us = metric(
        server.metrics(), "convoy_rate_limiter_wait_duration_us", model="shared_b", version="1"
    )
    # Each request here ran alone, so its resource wait is part of its queue time.
    assert waited_us > 0
    assert stats.queue.ns >= waited_us * 1000
