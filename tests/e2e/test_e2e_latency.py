"""Serving to the caller's time, in process and through front-end workers: deadlines honoured in
the queue (a gRPC deadline, the `timeout` parameter over gRPC and HTTP, an ensemble's steps; an
expired request is never executed, and statistics and metrics count it), fair share (a light
client ahead of a heavy one's backlog; a weighted class its weight in batch slots; a model
that asks for it on a server without --fair-share-header warned about at each load), and
keep-alive (an idle model unloads; a burst of requests loads it once, and every one is
answered)."""

from __future__ import annotations

import queue
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import (
    IN_PROCESS,
    REPO_ROOT,
    ConvoyServer,
    StartServer,
    metric,
    serve_command,
    wait_for,
)
from tritonclient.utils import InferenceServerException

from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc as pb_grpc
from scripts import models
from scripts.latency_harness import FLAT, RETRYING

# The models here run FLAT, which sleeps its config's sleep_s per batch and answers X as Y.
BLOCK_S = 0.4  # how long one execution of `slow` takes
DEADLINE_US = 100_000  # the expiring requests' deadline, well inside one execution

_IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def _python_config(name: str, sleep_s: float, extra: str = "", max_batch_size: int = 8) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{_IO}'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n"
        f'parameters {{ key: "sleep_s" value {{ string_value: "{sleep_s}" }} }}\n'
        f"{IN_PROCESS}{extra}"
    )


def _parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'


TARGET_MS = 350  # `targeted`: batches of one take 100 ms, so about three fit in the target
FAIR_HEADER = "x-client"  # --fair-share-header of the module's servers

# Holds each batch until the file named by its `gate` parameter exists, then answers every
# request of it with the batch's number (1, 2, ...) as Y: the order of service, with no clock.
NUMBERED = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = json.loads(args["model_config"])["parameters"]["gate"]["string_value"]
        self.batches = 0

    def execute(self, requests):
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.batches += 1
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.full_like(x, self.batches))])
            for x in xs
        ]
"""
WEIGHTED_BATCH = 4  # `weighted`: its max batch size
WEIGHTS = "gold=3"  # its convoy_fair_share_weights; `bronze` weighs 1
BACKLOG = 12  # each class's requests queued behind the held batch
BURST = 1_000  # requests sent at once, each with a deadline of some milliseconds


ENSEMBLE = (
    'name: "slow_ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
    + _IO
    + 'ensemble_scheduling { step [ { model_name: "slow" model_version: -1 '
    'input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } ] }\n'
)


def write_repository(root: Path) -> Path:
    repo = root / "models"
    models.write_python_model(repo, "slow", FLAT, _python_config("slow", BLOCK_S))
    models.write_python_model(repo, "fast", FLAT, _python_config("fast", 0.0))
    targeted = _python_config(
        "targeted", 0.1, _parameter("convoy_latency_target_ms", str(TARGET_MS)), max_batch_size=1
    )
    models.write_python_model(repo, "targeted", FLAT, targeted)
    fair = _python_config("fair", 0.1, _parameter("convoy_fair_share", "true"), max_batch_size=2)
    models.write_python_model(repo, "fair", FLAT, fair)
    weighted = _python_config(
        "weighted",
        0.0,
        _parameter("convoy_fair_share", "true")
        + _parameter("convoy_fair_share_weights", WEIGHTS)
        + _parameter("gate", str(root / "open")),
        max_batch_size=WEIGHTED_BATCH,
    )
    models.write_python_model(repo, "weighted", NUMBERED, weighted)
    (repo / "slow_ensemble" / "1").mkdir(parents=True)
    (repo / "slow_ensemble" / "config.pbtxt").write_text(ENSEMBLE, encoding="utf-8")
    return repo


@pytest.fixture(scope="module", params=["in-process", "workers"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    root = tmp_path_factory.mktemp("latency")
    flags: tuple[str, ...] = ("--fair-share-header", FAIR_HEADER)
    if request.param == "workers":
        flags += ("--frontend-workers", "2")
    convoy = ConvoyServer(write_repository(root), root / "server.log", *flags).start()
    try:
        # One request first: the tests time their requests against one running batch, which
        # a first request's connection and start-up would otherwise stretch.
        _grpc(convoy, "slow", 0.0)
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
    assert "deadline" in grpc_timeout.message() and "not executed" in grpc_timeout.message()
    assert http_timeout.status() == "503"
    assert "not executed" in http_timeout.message()
    np.testing.assert_array_equal(futures[3].result(10), _x(5.0))
    runs, inferences = _executions(server, "slow")
    assert (runs - before_runs, inferences - before_inferences) == (2, 2)  # blocker, then 5.0
    assert _expired(server, "slow") - before_expired == 3


def _stream(server: ConvoyServer, value: float, **kwargs: Any) -> np.ndarray:
    """One request over a ModelStreamInfer stream; its error (in-band) raised."""
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        client.start_stream(lambda result, error: answers.put(error or result))
        tensor = grpcclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(_x(value))
        client.async_stream_infer("slow", [tensor], **kwargs)
        answer = answers.get(timeout=10)
        client.stop_stream()
    if isinstance(answer, InferenceServerException):
        raise answer
    return answer.as_numpy("Y")  # type: ignore[no-any-return]


def test_a_stream_requests_deadline_is_honoured_in_the_queue(server: ConvoyServer) -> None:
    before_runs, _ = _executions(server, "slow")
    futures = _behind_a_running_batch(
        server,
        [
            lambda: _stream(server, 2.0, timeout=DEADLINE_US),
            lambda: _stream(server, 3.0, timeout=5_000_000),
        ],
    )
    error = _error_of(futures[0])
    assert "deadline" in error.message() and "not executed" in error.message()
    np.testing.assert_array_equal(futures[1].result(10), _x(3.0))
    assert _executions(server, "slow")[0] - before_runs == 2  # the blocker, then 3.0


def test_an_ensembles_deadline_holds_for_its_steps(server: ConvoyServer) -> None:
    before_runs, _ = _executions(server, "slow")
    futures = _behind_a_running_batch(
        server, [lambda: _grpc(server, "slow_ensemble", 2.0, timeout=DEADLINE_US)]
    )
    error = _error_of(futures[0])
    assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert "not executed" in error.message()
    assert _executions(server, "slow")[0] - before_runs == 1  # only the blocker ran


def test_a_model_over_its_latency_target_refuses_at_once_and_counts_it(
    server: ConvoyServer,
) -> None:
    _grpc(server, "targeted", 0.0)  # one batch measured
    before = metric(
        server.metrics(), "convoy_inference_latency_target_refused", model="targeted", version="1"
    )
    calls: list[Callable[[], np.ndarray]] = []
    for i in range(12):
        call = _grpc if i % 2 else _http
        calls.append(lambda call=call, i=i: call(server, "targeted", float(i)))  # type: ignore[misc]
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(_timed, call) for call in calls]
        outcomes = [future.result(30) for future in futures]
    refused = [(error, took) for error, took in outcomes if error is not None]
    served = [took for error, took in outcomes if error is None]
    assert refused and served, "12 x 100 ms does not fit a 350 ms target; some fit"
    for error, took in refused:
        assert error.status() in ("StatusCode.UNAVAILABLE", "503"), error
        assert f"latency target of {TARGET_MS} ms" in error.message()
        assert took < 0.2  # refused at once, not after waiting
    assert max(served) < 2 * TARGET_MS / 1000  # p100 of the accepted, with the client's overhead
    after = metric(
        server.metrics(), "convoy_inference_latency_target_refused", model="targeted", version="1"
    )
    assert after - before == len(refused)


def _retrying(server: ConvoyServer, value: float) -> np.ndarray:
    # A channel that retries UNAVAILABLE under gRPC's retry policy, waiting out each pushback.
    with grpcclient.InferenceServerClient(server.url, channel_args=RETRYING) as client:
        tensor = grpcclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(_x(value))
        return client.infer("targeted", [tensor]).as_numpy("Y")  # type: ignore[no-any-return]


def _raw_refusal(server: ConvoyServer) -> grpc.RpcError | None:
    """One ModelInfer on `targeted` with a bare gRPC stub (its trailers in reach); the error it
    got, or None when it was answered."""
    request = pb.ModelInferRequest(model_name="targeted")
    request.inputs.add(name="X", datatype="FP32", shape=[1, 1])
    request.raw_input_contents.append(_x(0.5).tobytes())
    with grpc.insecure_channel(server.url) as channel:
        try:
            pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
        except grpc.RpcError as error:
            return error
    return None


def test_a_refusal_says_when_to_retry_and_a_client_with_a_retry_policy_is_answered(
    server: ConvoyServer,
) -> None:
    _grpc(server, "targeted", 0.0)  # one batch measured

    def refusals() -> float:
        return metric(
            server.metrics(),
            "convoy_inference_latency_target_refused",
            model="targeted",
            version="1",
        )

    before = refusals()
    with ThreadPoolExecutor(9) as pool:
        # Eight clients at once (800 ms of work against a 350 ms target), each retrying.
        answers = [pool.submit(_retrying, server, float(i)) for i in range(8)]
        wait_for(lambda: refusals() > before, "a refusal: the queue is over the target")
        raw = pool.submit(_raw_refusal, server).result(30)
        for i, answer in enumerate(answers):
            np.testing.assert_array_equal(answer.result(30), _x(float(i)))
    assert isinstance(raw, grpc.RpcError), "the queue was over the target when it came"
    assert raw.code() == grpc.StatusCode.UNAVAILABLE
    pushback = dict(raw.trailing_metadata() or ())["grpc-retry-pushback-ms"]
    assert 1 <= int(pushback) <= 8 * 100 * 4  # the excess over the target, within its scale
    assert f"retry in {pushback} ms" in (raw.details() or "")


def _timed(call: Callable[[], np.ndarray]) -> tuple[InferenceServerException | None, float]:
    started = time.monotonic()
    try:
        call()
    except InferenceServerException as error:
        return error, time.monotonic() - started
    return None, time.monotonic() - started


def test_fair_share_takes_a_light_client_in_ahead_of_a_heavy_clients_backlog(
    server: ConvoyServer,
) -> None:
    done: dict[str, float] = {}
    sent: dict[str, float] = {}

    def send(tag: str, client: str, use_http: bool) -> None:
        call = _http if use_http else _grpc
        sent[tag] = time.monotonic()
        call(server, "fair", 1.0, headers={FAIR_HEADER: client})
        done[tag] = time.monotonic()

    with ThreadPoolExecutor(12) as pool:
        heavy = [pool.submit(send, f"heavy{i}", "heavy", i % 2 == 1) for i in range(10)]
        time.sleep(0.05)  # the heavy backlog is queued first
        light = [pool.submit(send, f"light{i}", f"light{i}", i == 1) for i in range(2)]
        for future in [*heavy, *light]:
            future.result(30)
    # Batches of 2 at 100 ms. First come, first served, a light client would wait behind the
    # heavy client's whole backlog: all 10 heavy requests would finish while it waits. Served
    # least lately first, it goes into the next batch beside the heavy client: while it waits,
    # the batch running when it came and the one it joins finish 3 or 4 heavy requests, a
    # batch or two more where a loaded machine is slow to send it (counted from when its
    # client was called, not from when its request was queued).
    for i in range(2):
        tag = f"light{i}"
        meanwhile = [h for h in range(10) if sent[tag] <= done[f"heavy{h}"] <= done[tag]]
        assert len(meanwhile) <= 7, f"{tag} waited behind the backlog: {len(meanwhile)} heavy"


def test_a_weighted_class_takes_its_weight_in_batch_slots(server: ConvoyServer) -> None:
    """`bronze` queues its backlog first, then `gold` (weight 3) as much, while a batch is held;
    served by weight, gold takes three of every four slots, though first come, first
    served would take all of bronze's first. Counted by batch numbers, not by clock."""
    labels = {"model": "weighted", "version": "1"}

    def queued() -> float:
        return metric(server.metrics(), "nv_inference_pending_request_count", **labels)

    def executing() -> bool:
        page = server.metrics()
        return (
            metric(page, "convoy_inference_inflight_requests", **labels) == 1
            and metric(page, "nv_inference_pending_request_count", **labels) == 0
        )

    def send(client: str) -> int:
        headers = {FAIR_HEADER: client}
        return int(_grpc(server, "weighted", 1.0, headers=headers).ravel()[0])

    with ThreadPoolExecutor(2 * BACKLOG + 1) as pool:
        held = pool.submit(send, "held")  # runs alone, in the first batch, until the gate opens
        wait_for(executing, "the held batch")  # it has left the queue and waits at the gate
        bronze = [pool.submit(send, "bronze") for _ in range(BACKLOG)]
        wait_for(lambda: queued() == BACKLOG, "bronze's backlog")
        gold = [pool.submit(send, "gold") for _ in range(BACKLOG)]
        wait_for(lambda: queued() == 2 * BACKLOG, "gold's backlog")
        (server.repository.parent / "open").touch()
        assert held.result(30) == 1
        batches = {
            "bronze": [future.result(30) for future in bronze],
            "gold": [future.result(30) for future in gold],
        }
    # The first three batches after the held one (twelve slots): 9 gold and 3 bronze by weight;
    # 6 and 6 unweighted; 0 gold first come, first served.
    first = sorted({*batches["bronze"], *batches["gold"]})[:3]
    served = {client: sum(b in first for b in numbers) for client, numbers in batches.items()}
    assert served["gold"] >= 2 * served["bronze"] > 0, (served, batches)
    assert sum(served.values()) == 3 * WEIGHTED_BATCH, batches


UNCLASSIFIED = (
    "model 'fair_alone' sets convoy_fair_share, but the server was started without "
    "--fair-share-header"
)


def test_a_fair_share_model_without_the_servers_header_is_warned_about_at_each_load(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    fair = _python_config(
        "fair_alone",
        0.0,
        _parameter("convoy_fair_share", "true") + "version_policy: { all { } }\n",
    )
    models.write_python_model(repo, "fair_alone", FLAT, fair)
    shutil.copytree(repo / "fair_alone" / "1", repo / "fair_alone" / "2")
    models.write_python_model(repo, "slow", FLAT, _python_config("slow", 0.0))
    flags = ("--model-control-mode", "explicit", "--load-model", "*")
    server = start_server(repo, *flags)
    log = server.log()
    warnings = [line for line in log.splitlines() if UNCLASSIFIED in line]
    assert len(warnings) == 1, log  # one load of two versions: one warning
    assert re.search(r" W \S+\] " + re.escape(UNCLASSIFIED), warnings[0]), warnings  # WARNING
    assert "'slow' sets convoy_fair_share" not in log
    # It serves all the same (first come, first served), and each load says it again.
    np.testing.assert_array_equal(_grpc(server, "fair_alone", 2.0), _x(2.0))
    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("fair_alone")
    wait_for(lambda: server.log().count(UNCLASSIFIED) == 2, "the second load's warning")

    with_header = start_server(repo, *flags, "--fair-share-header", FAIR_HEADER)
    np.testing.assert_array_equal(_grpc(with_header, "fair_alone", 3.0), _x(3.0))
    assert "sets convoy_fair_share" not in with_header.log()


def test_deadlines_that_end_as_requests_arrive_leave_no_errors_in_the_log(
    server: ConvoyServer,
) -> None:
    """Bursts whose deadlines pass while the server works on them: some requests' calls end
    in gRPC's core as Convoy answers them (an error or outputs), where the answer cannot go
    out. Their clients have the core's status, the server logs no failed send as an error,
    and it serves on."""
    answers: queue.Queue[Any] = queue.Queue()
    tensor = grpcclient.InferInput("X", [1, 1], "FP32")
    tensor.set_data_from_numpy(_x(1.0))
    with grpcclient.InferenceServerClient(server.url) as client:
        for timeout_s in (0.01, 0.02, 0.04):
            for _ in range(BURST):
                client.async_infer(
                    "fast",
                    [tensor],
                    lambda result, error: answers.put(error or result),
                    client_timeout=timeout_s,
                )
            outcomes = [answers.get(timeout=30) for _ in range(BURST)]
            failed = [o for o in outcomes if isinstance(o, InferenceServerException)]
            # CANCELLED: the server's core ended the call at its deadline (a reset stream)
            # a moment before the client's own timer fired.
            ended = {"StatusCode.DEADLINE_EXCEEDED", "StatusCode.CANCELLED"}
            assert {e.status() for e in failed} <= ended
    np.testing.assert_array_equal(_grpc(server, "fast", 2.0), _x(2.0))
    log = server.log()
    assert "ExecuteBatchError" not in log and "Traceback" not in log, log[
        log.find("Traceback") - 2000 :
    ]


def test_a_request_within_its_deadline_is_answered(server: ConvoyServer) -> None:
    np.testing.assert_array_equal(_grpc(server, "slow", 6.0, timeout=5_000_000), _x(6.0))
    np.testing.assert_array_equal(_http(server, "slow", 7.0, timeout=5_000_000), _x(7.0))
    np.testing.assert_array_equal(_grpc(server, "slow", 8.0, client_timeout=5.0), _x(8.0))


# Keep-alive: explicit mode, an mlp whose own keep-alive (1 s) beats the server's (60 s).
KEEP_ALIVE_CONFIG = (
    'name: "mlp_idle"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
    'input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]\n'
    'output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]\n'
    'parameters { key: "convoy_keep_alive_s" value { string_value: "1" } }\n'
)


@pytest.mark.parametrize("front_end", ["in-process", "workers"])
def test_an_idle_model_is_unloaded_and_a_burst_of_requests_loads_it_once(
    start_server: StartServer, tmp_path: Path, front_end: str
) -> None:
    repo = tmp_path / "models"
    (repo / "mlp_idle" / "1").mkdir(parents=True)
    (repo / "mlp_idle" / "config.pbtxt").write_text(KEEP_ALIVE_CONFIG, encoding="utf-8")
    onnx.save(models.mlp(), repo / "mlp_idle" / "1" / "model.onnx")
    flags = ["--model-control-mode", "explicit", "--model-keep-alive", "60"]
    if front_end == "workers":
        flags += ["--frontend-workers", "2"]
    server = start_server(repo, *flags)
    x = np.random.default_rng(0).random((1, 256), dtype=np.float32)

    def grpc_infer() -> np.ndarray:
        with grpcclient.InferenceServerClient(server.url) as client:
            tensor = grpcclient.InferInput("INPUT", [1, 256], "FP32")
            tensor.set_data_from_numpy(x)
            return client.infer("mlp_idle", [tensor]).as_numpy("OUTPUT")  # type: ignore[no-any-return]

    def http_infer() -> np.ndarray:
        with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
            tensor = httpclient.InferInput("INPUT", [1, 256], "FP32")
            tensor.set_data_from_numpy(x)
            return client.infer("mlp_idle", [tensor]).as_numpy("OUTPUT")  # type: ignore[no-any-return]

    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("mlp_idle")
        expected = grpc_infer()
        deadline = time.monotonic() + 10
        while client.is_model_ready("mlp_idle") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not client.is_model_ready("mlp_idle"), "an idle model past its keep-alive unloads"
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert "unloaded after 1 s idle" in index["mlp_idle"].reason
        with ThreadPoolExecutor(32) as pool:
            answers = [pool.submit(grpc_infer if i % 2 else http_infer) for i in range(32)]
            for answer in answers:
                np.testing.assert_allclose(answer.result(30), expected, rtol=1e-6)
        assert client.is_model_ready("mlp_idle")
    page = server.metrics()
    assert metric(page, "convoy_model_idle_unloads", model="mlp_idle") == 1
    assert metric(page, "convoy_model_cold_starts", model="mlp_idle") == 1  # one shared load
    assert metric(page, "convoy_model_cold_start_duration_us", model="mlp_idle") > 0


def test_keep_alive_needs_explicit_model_control(start_server: StartServer, tmp_path: Path) -> None:
    command = serve_command(tmp_path, "--model-keep-alive", "5")
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert b"--model-keep-alive needs --model-control-mode explicit" in done.stderr


# Loads in about a second: longer than the server below lets a request wait for it.
SLOW_TO_LOAD = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(1.0)

    def execute(self, requests):
        outputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]) for y in outputs]
"""


def test_a_reload_past_the_load_timeout_answers_unavailable_and_finishes_for_later_requests(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    config = _python_config("late_loader", 0.0, _parameter("convoy_keep_alive_s", "0.5"))
    models.write_python_model(repo, "late_loader", SLOW_TO_LOAD, config)
    flags = ("--model-control-mode", "explicit", "--lazy-load-timeout-secs", "0.2")
    server = start_server(repo, *flags)
    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("late_loader")
        np.testing.assert_array_equal(_grpc(server, "late_loader", 1.0), _x(1.0))
        deadline = time.monotonic() + 10
        while client.is_model_ready("late_loader") and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(InferenceServerException) as grpc_error:
            _grpc(server, "late_loader", 2.0)
        assert grpc_error.value.status() == "StatusCode.UNAVAILABLE"
        expected = "'late_loader' was unloaded after idling and did not load again within 0.2 s"
        assert expected in grpc_error.value.message()
        with pytest.raises(InferenceServerException) as http_error:
            _http(server, "late_loader", 3.0)  # the load goes on: it waits for the same one
        assert http_error.value.status() == "503" and expected in http_error.value.message()
        deadline = time.monotonic() + 10
        while not client.is_model_ready("late_loader") and time.monotonic() < deadline:
            time.sleep(0.1)
        np.testing.assert_array_equal(_http(server, "late_loader", 4.0), _x(4.0))
    assert metric(server.metrics(), "convoy_model_cold_starts", model="late_loader") == 1


def test_an_ensembles_composing_model_is_kept_while_the_ensemble_loads(
    start_server: StartServer, tmp_path: Path
) -> None:
    """`quick` loads first and idles past its keep-alive while `slow_start`, the ensemble's
    next step, initializes: it stays loaded, and the ensemble loads and answers."""
    repo = tmp_path / "models"
    quick = _python_config("quick", 0.0, _parameter("convoy_keep_alive_s", "0.3"))
    models.write_python_model(repo, "quick", FLAT, quick)
    models.write_python_model(repo, "slow_start", SLOW_TO_LOAD, _python_config("slow_start", 0.0))
    (repo / "pair" / "1").mkdir(parents=True)
    (repo / "pair" / "config.pbtxt").write_text(
        'name: "pair"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        + _IO
        + "ensemble_scheduling { step [ "
        '{ model_name: "quick" model_version: -1 '
        'input_map { key: "X" value: "X" } output_map { key: "Y" value: "MID" } }, '
        '{ model_name: "slow_start" model_version: -1 '
        'input_map { key: "X" value: "MID" } output_map { key: "Y" value: "Y" } } ] }\n',
        encoding="utf-8",
    )
    server = start_server(repo, "--model-control-mode", "explicit")
    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("pair")
        np.testing.assert_array_equal(_grpc(server, "pair", 5.0), _x(5.0))
        time.sleep(0.6)  # past quick's keep-alive: a ready ensemble keeps it loaded
        assert client.is_model_ready("quick")
    assert "unloaded after" not in server.log()


@pytest.mark.parametrize("front_end", ["in-process", "workers"])
def test_a_sequence_requests_deadline_is_honoured_in_its_sequence(
    start_server: StartServer, tmp_path: Path, front_end: str
) -> None:
    repo = tmp_path / "models"
    # Longer than BLOCK_S: the late requests, each on a connection of its own, must arrive while
    # the first runs, and on a loaded 2-core machine one came after 0.4 s had passed.
    block_s = 3 * BLOCK_S
    config = (
        f'name: "slow_sequence"\nbackend: "python"\nmax_batch_size: 1\n{_IO}'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\nsequence_batching { }\n"
        + _parameter("sleep_s", str(block_s))
        + IN_PROCESS
    )
    models.write_python_model(repo, "slow_sequence", FLAT, config)
    server = start_server(repo, *(("--frontend-workers", "2") if front_end == "workers" else ()))

    def step(value: float, protocol: str, **kwargs: Any) -> np.ndarray:
        call = _grpc if protocol == "grpc" else _http
        return call(server, "slow_sequence", value, sequence_id=7, **kwargs)

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(step, 1.0, "grpc", sequence_start=True)
        time.sleep(BLOCK_S / 4)  # the sequence's first request is running
        late = [
            pool.submit(step, 2.0, "grpc", timeout=DEADLINE_US),
            pool.submit(step, 3.0, "http", timeout=DEADLINE_US),
        ]
        np.testing.assert_array_equal(first.result(10 + block_s), _x(1.0))
        for future in late:
            error = _error_of(future)
            assert error.status() in ("StatusCode.DEADLINE_EXCEEDED", "503"), error
            assert "not executed" in error.message()
    np.testing.assert_array_equal(step(4.0, "http", sequence_end=True), _x(4.0))
    assert _executions(server, "slow_sequence")[0] == 2  # the first and the last
    assert _expired(server, "slow_sequence") == 2
