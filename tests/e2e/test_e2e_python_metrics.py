"""Triton's custom metrics in a model.py (`pb_utils.MetricFamily`), in a worker process and in
the server's: counters, gauges and histograms on the server's metrics page under the model's own
names and labels, one series shared by a model's instances, every misuse refused with an
exception the model can catch, and the model's series gone once it is unloaded."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import IN_PROCESS, ConvoyServer, metric, wait_for
from tritonclient.utils import InferenceServerException

from scripts import models

METERED = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

COUNTER, GAUGE, HISTOGRAM = (
    pb_utils.MetricFamily.COUNTER,
    pb_utils.MetricFamily.GAUGE,
    pb_utils.MetricFamily.HISTOGRAM,
)


def _refusal(wrong):
    try:
        wrong()
    except pb_utils.TritonModelException as exc:
        return exc.message()
    return "accepted"


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        self.seen = pb_utils.MetricFamily("requests_seen", "Requests seen", COUNTER).Metric(
            labels=labels
        )
        self.last = pb_utils.MetricFamily("last_x", "The last X", GAUGE).Metric(labels=labels)
        self.xs = pb_utils.MetricFamily("x_values", "X values", HISTOGRAM).Metric(
            labels=labels, buckets=[1.0, 10.0]
        )
        self.refusals = [
            _refusal(lambda: self.seen.increment(-1)),
            _refusal(lambda: self.seen.set(1)),
            _refusal(lambda: self.last.observe(1)),
            _refusal(lambda: self.xs.value()),
            _refusal(lambda: pb_utils.MetricFamily("nv_mine", "mine", GAUGE)),
            _refusal(lambda: pb_utils.MetricFamily("requests_seen", "other words", COUNTER)),
            _refusal(lambda: pb_utils.MetricFamily("x_values", "X values", HISTOGRAM).Metric()),
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = float(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0])
            self.seen.increment(1)
            self.last.set(x)
            self.xs.observe(x)
            shown = {"seen": self.seen.value(), "last": self.last.value(), "pid": os.getpid()}
            shown["refusals"] = self.refusals
            out = np.array([json.dumps(shown).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SHOWN", out)]))
        return responses
"""
IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "SHOWN" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
)
MODELS = ("metered", "metered_in_process")
ALONE = "metered_alone"  # one instance in a worker process, which the tests kill
REFUSALS = (
    "a counter cannot decrease",
    "only a gauge can be set",
    "only a histogram observes",
    "a histogram has no value()",
    "are the server's own",
    "registered already as a counter",
    "a histogram needs buckets",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("python-metrics")
    repo = root / "models"
    for name in MODELS:
        config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n' + IO
        models.write_python_model(
            repo, name, METERED, config + (IN_PROCESS if name.endswith("in_process") else "")
        )
    alone = f'name: "{ALONE}"\nbackend: "python"\nmax_batch_size: 0\n' + IO
    models.write_python_model(repo, ALONE, METERED, alone.replace("count: 2", "count: 1"))
    flags = ("--model-control-mode", "explicit", "--load-model", "*")
    started = ConvoyServer(repo, root / "server.log", *flags).start()
    yield started
    started.kill()


def _shown(client: grpcclient.InferenceServerClient, model: str, x: float) -> dict[str, object]:
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([x], np.float32))
    answer = client.infer(model, [tensor]).as_numpy("SHOWN")
    assert answer is not None
    shown: dict[str, object] = json.loads(answer[0])
    return shown


@pytest.mark.parametrize("model", MODELS)
def test_a_models_metrics_reach_the_metrics_page(server: ConvoyServer, model: str) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        answers = [_shown(client, model, x) for x in (0.5, 5.0, 50.0)]
    # Both instances count into one series: three requests, whichever instance ran each.
    assert [a["seen"] for a in answers] == [1.0, 2.0, 3.0]
    assert answers[-1]["last"] == 50.0
    refusals = answers[-1]["refusals"]
    assert isinstance(refusals, list) and len(refusals) == len(REFUSALS)
    for refusal, expected in zip(refusals, REFUSALS, strict=True):
        assert expected in refusal
    page = server.metrics()
    assert "# TYPE requests_seen counter" in page
    assert "# HELP x_values X values" in page
    assert metric(page, "requests_seen", model=model) == 3
    assert metric(page, "last_x", model=model) == 50
    assert metric(page, "x_values_bucket", model=model, le="1") == 1
    assert metric(page, "x_values_bucket", model=model, le="10") == 2
    assert metric(page, "x_values_bucket", model=model, le="+Inf") == 3
    assert metric(page, "x_values_count", model=model) == 3
    assert metric(page, "x_values_sum", model=model) == 55.5


def test_an_unloaded_models_series_leave_the_page(server: ConvoyServer) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        _shown(client, "metered", 2.0)
        _shown(client, "metered_in_process", 2.0)
    http = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        http.unload_model("metered")
        wait_for(
            lambda: np.isnan(metric(server.metrics(), "requests_seen", model="metered")),
            "the unloaded model's series to leave",
        )
        # The other model's series of the same families stay.
        assert metric(server.metrics(), "requests_seen", model="metered_in_process") >= 1
        http.load_model("metered")
        with grpcclient.InferenceServerClient(server.url) as client:
            assert _shown(client, "metered", 1.0)["seen"] == 1.0  # a fresh series
    finally:
        http.close()


def test_a_restarted_worker_counts_on_in_the_same_series(server: ConvoyServer) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        first = _shown(client, ALONE, 1.0)
        assert isinstance(first["pid"], int)
        os.kill(first["pid"], signal.SIGKILL)
        again: dict[str, object] = {}

        def answered_by_another() -> bool:
            try:
                again.update(_shown(client, ALONE, 2.0))
            except InferenceServerException:
                return False  # not ready yet, or the batch that met the dying worker
            return again["pid"] != first["pid"]

        wait_for(answered_by_another, "a new worker to answer")
    assert float(str(again["seen"])) >= float(str(first["seen"])) + 1
    assert metric(server.metrics(), "requests_seen", model=ALONE) == again["seen"]
