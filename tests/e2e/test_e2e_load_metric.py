"""The autoscaling gauges: requests in flight and capacity per model version, and
`convoy_load_ratio`, exact while a known number of requests is held inside a model, with idle
models and an ensemble beside it."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, ensemble_config, infer_input

from scripts import models
from scripts.gen_models import write_simple

HELD = 6  # requests held in the gated model
GATED_CAPACITY = 4  # one instance, max_batch_size 4


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "gated",
        models.GATED_MODEL,
        'name: "gated"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "dynamic_batching { }\n"
        f'parameters {{ key: "gate" value: {{ string_value: "{tmp_path / "open"}" }} }}\n',
    )
    write_simple(repo)  # idle: one instance x 8
    models.write_model(
        repo,
        "twice",
        models.simple(),
        'name: "twice"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n",
    )  # idle: two instances x 8
    ensemble = ensemble_config("ensemble_simple", "TYPE_FP32", 16, [("IN", "OUT", "simple")])
    models.write_model(repo, "ensemble_simple", None, ensemble)
    (repo / "ensemble_simple" / "1").mkdir()  # no instances of its own: left out
    return repo


def _samples(text: str, name: str) -> dict[str, float]:
    """Each sample of a family by its model label ("" for a sample without labels)."""
    found = {}
    for labels, value in re.findall(rf"^{name}(?:{{([^}}]*)}})? (\S+)$", text, re.MULTILINE):
        model = re.search(r'model="([^"]*)"', labels or "")
        found[model.group(1) if model else ""] = float(value)
    return found


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_gauges_count_held_requests_and_ignore_idle_models(
    start_server: StartServer, repository: Path
) -> None:
    server = start_server(repository)
    text = server.metrics()
    assert "ensemble_simple" in _samples(text, "nv_inference_request_success")  # it is loaded
    assert _samples(text, "convoy_inference_capacity") == {
        "gated": GATED_CAPACITY,
        "simple": 8,
        "twice": 16,
    }
    assert _samples(text, "convoy_inference_inflight_requests") == {
        "gated": 0,
        "simple": 0,
        "twice": 0,
    }
    assert _samples(text, "convoy_load_ratio") == {"": 0}
    assert "# TYPE convoy_load_ratio gauge" in text
    # No model's batches wait for batch-mates on an idle loop (natural batching).
    assert _samples(text, "convoy_natural_batching") == {"gated": 0, "simple": 0, "twice": 0}
    assert _samples(text, "convoy_delay_waited_out") == {"gated": 0, "simple": 0, "twice": 0}

    answers: list[np.ndarray] = []
    x = np.arange(4, dtype=np.float32).reshape(1, 4)

    def send() -> None:
        client = grpcclient.InferenceServerClient(server.url)
        try:
            result = client.infer("gated", [infer_input("X", x, "FP32")])
            answers.append(result.as_numpy("Y"))
        finally:
            client.close()

    threads = [threading.Thread(target=send) for _ in range(HELD)]
    for thread in threads:
        thread.start()
    try:
        _wait_for(
            lambda: (
                _samples(server.metrics(), "convoy_inference_inflight_requests")["gated"] == HELD
            ),
            f"{HELD} requests in flight",
        )
        text = server.metrics()
        in_flight = _samples(text, "convoy_inference_inflight_requests")
        assert in_flight == {"gated": HELD, "simple": 0, "twice": 0}
        # The pooled form would read 6 / 28: the idle models' instances do not dilute this one.
        assert _samples(text, "convoy_load_ratio") == {"": HELD / GATED_CAPACITY}
        # Triton's own gauge counts only the requests still queued (at least the two that
        # did not fit in the first batch).
        pending = _samples(text, "nv_inference_pending_request_count")["gated"]
        assert HELD - GATED_CAPACITY <= pending < HELD
    finally:
        (repository.parent / "open").touch()
        for thread in threads:
            thread.join(timeout=30)
    assert len(answers) == HELD
    for answer in answers:
        np.testing.assert_array_equal(answer, x + 1)
    _wait_for(
        lambda: _samples(server.metrics(), "convoy_load_ratio") == {"": 0},
        "the ratio back at 0",
    )
