"""The drain at SIGTERM, in process and through front-end workers: every request the server took
is answered; what it does not take is refused in a way that is safe to retry (UNAVAILABLE, or a
connection refused), never CANCELLED; open gRPC streams get their answers and then end OK; an
HTTP keep-alive connection closes after its answer; a second signal stops at once, leaving no
process behind; a restarted server opens its ports only once its models are loaded and warmed.
The 10-run figures are scripts/drain_check.py's."""

from __future__ import annotations

import http.client
import json
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, StartServer, infer_input, metric, simple_inputs
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from scripts import models
from scripts.drain_check import alive, child_pids
from scripts.gen_models import write_simple

SLOW_S = 1.0  # how long a request of `sleepy` in flight at the signal takes
WARMUP_S = 0.5  # one warmup execute
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # one connection per client


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("drain") / "models"
    write_simple(repo)
    models.write_sleepy(repo)
    return repo


@pytest.fixture(params=["in process", "2 workers"])
def server(
    request: pytest.FixtureRequest, start_server: StartServer, repository: Path
) -> ConvoyServer:
    flags = ("--frontend-workers", "2") if request.param == "2 workers" else ()
    return start_server(repository, "--exit-timeout-secs", "20", *flags)


def _wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _in_flight(server: ConvoyServer, count: int) -> Callable[[], bool]:
    """Whether `count` requests of `sleepy` are in the server's hands."""
    return lambda: (
        metric(server.metrics(), "convoy_inference_inflight_requests", model="sleepy", version="1")
        == count
    )


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # A connect racing the listener's shutdown is reset, never accepted: not yet refused
        # outright, so ask again.
        return False
    return False


def _sleepy(
    client: grpcclient.InferenceServerClient, seconds: float, model: str = "sleepy"
) -> np.ndarray:
    x = np.full((1, 1), seconds, dtype=np.float32)
    result: np.ndarray = client.infer(model, [infer_input("X", x, "FP32")]).as_numpy("Y")
    return result


def _hammer(url: str, stop: threading.Event, outcomes: list[str]) -> None:
    """`simple` requests one after the other on the client's own connection until `stop`."""
    client = grpcclient.InferenceServerClient(url, channel_args=OWN_CONNECTION)
    seed = 0
    try:
        while not stop.is_set():
            inputs, a, b = simple_inputs(1, seed=seed)
            seed += 1
            try:
                result = client.infer("simple", inputs, client_timeout=10)
                outcomes.append(
                    "ok" if np.array_equal(result.as_numpy("OUTPUT0"), a + b) else "WRONG"
                )
            except InferenceServerException as exc:
                outcomes.append(str(exc.status()))
    finally:
        client.close()


@pytest.fixture
def load(server: ConvoyServer) -> Iterator[list[str]]:
    """Four clients sending `simple` requests back to back until the test ends."""
    outcomes: list[str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_hammer, args=(server.url, stop, outcomes)) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    _wait_until(lambda: outcomes.count("ok") >= 20)
    yield outcomes
    stop.set()
    for thread in threads:
        thread.join(15)


def test_a_drain_under_load_answers_what_it_took_and_refuses_the_rest_retryably(
    server: ConvoyServer, load: list[str]
) -> None:
    assert server.process is not None
    children = child_pids(server.process.pid)
    client = grpcclient.InferenceServerClient(server.url)
    with ThreadPoolExecutor(4) as pool:
        slow: list[Future[np.ndarray]] = [pool.submit(_sleepy, client, SLOW_S) for _ in range(4)]
        _wait_until(_in_flight(server, 4))
        server.send_signal(signal.SIGTERM)
        # New connections are refused at once, while the slow requests are still running.
        _wait_until(lambda: _refused(server.grpc_port) and _refused(server.http_port), 2.0)
        assert not all(future.done() for future in slow)
        for future in slow:
            np.testing.assert_array_equal(future.result(timeout=20), [[SLOW_S]])
    client.close()
    assert server.wait() == 0, server.log()
    time.sleep(0.3)  # the load goes on against the stopped server for a while
    assert load.count("ok") > 0
    assert set(load) <= {"ok", "StatusCode.UNAVAILABLE"}, sorted(set(load))
    assert not any(alive(pid) for pid in children)


def _stream_request(seconds: float, rid: str) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="sleepy", id=rid)
    tensor = request.inputs.add(name="X", datatype="FP32", shape=[1, 1])
    tensor.contents.fp32_contents.append(seconds)
    return request


def test_an_open_stream_gets_its_answers_then_ends_cleanly(server: ConvoyServer) -> None:
    requests: queue.Queue[service_pb2.ModelInferRequest | None] = queue.Queue()

    def sent() -> Iterator[service_pb2.ModelInferRequest]:
        while (request := requests.get()) is not None:
            yield request

    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = stub.ModelStreamInfer(sent())
        for rid in ("a", "b", "c"):
            requests.put(_stream_request(SLOW_S, rid))
        _wait_until(_in_flight(server, 3))
        server.send_signal(signal.SIGTERM)
        # The client keeps its side open: the server ends the stream once it has answered.
        received = [(answer.error_message, answer.infer_response.id) for answer in answers]
        assert answers.code() == grpc.StatusCode.OK, answers.details()
        requests.put(None)
    assert sorted(received) == [("", "a"), ("", "b"), ("", "c")]
    assert server.wait() == 0, server.log()


def _json_infer(seconds: float) -> bytes:
    tensor = {"name": "X", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}
    return json.dumps({"inputs": [tensor]}).encode()


def test_an_http_keep_alive_connection_closes_after_its_answer(server: ConvoyServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=20)
    connection.request("GET", "/v2/health/ready")
    first = connection.getresponse()
    first.read()
    assert first.status == 200 and first.getheader("Connection") is None  # kept alive
    connection.request("POST", "/v2/models/sleepy/infer", body=_json_infer(SLOW_S))
    _wait_until(_in_flight(server, 1))
    server.send_signal(signal.SIGTERM)
    answer = connection.getresponse()
    body = json.loads(answer.read())
    assert answer.status == 200 and body["outputs"][0]["data"] == [SLOW_S]
    assert answer.getheader("Connection") == "close"
    assert answer.will_close
    connection.close()
    assert server.wait() == 0, server.log()


def test_a_second_signal_stops_at_once_leaving_no_process(
    start_server: StartServer, repository: Path
) -> None:
    server = start_server(repository, "--frontend-workers", "2", "--exit-timeout-secs", "60")
    assert server.process is not None
    children = child_pids(server.process.pid)
    assert children
    client = grpcclient.InferenceServerClient(server.url)
    with ThreadPoolExecutor(1) as pool:
        stuck = pool.submit(_sleepy, client, 5.0)
        _wait_until(_in_flight(server, 1))
        server.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert server.process.poll() is None  # draining: it waits for the request
        signalled = time.monotonic()
        server.send_signal(signal.SIGINT)
        assert server.wait() == 1, server.log()
        assert time.monotonic() - signalled < 3.0
        with pytest.raises(InferenceServerException):
            stuck.result(timeout=10)
    client.close()
    assert "second signal" in server.log()
    assert not any(alive(pid) for pid in children)


def test_a_restarted_server_listens_once_every_model_is_loaded_and_warmed(
    start_server: StartServer, tmp_path: Path
) -> None:
    """What a balancer needs of a restart: no port open, hence nothing to route to, before
    the models are ready, warmup included; ready as soon as it listens."""
    repo = tmp_path / "warmed"
    model = models.write_sleepy(repo, "warmed")
    (model / "warmup").mkdir()
    (model / "warmup" / "x").write_bytes(np.float32(WARMUP_S).tobytes())  # a 0.5 s execute
    with (model / "config.pbtxt").open("a", encoding="utf-8") as config:
        config.write(
            'model_warmup [ { name: "w" batch_size: 1 inputs { key: "X" value: '
            '{ data_type: TYPE_FP32 dims: [ 1 ] input_data_file: "x" } } } ]\n'
        )
    server = start_server(repo)
    log = server.log()
    assert log.index("warmup 'w' done") < log.index("serving gRPC on"), log
    with grpcclient.InferenceServerClient(server.url) as client:
        assert client.is_server_ready() and client.is_model_ready("warmed")
        np.testing.assert_array_equal(_sleepy(client, 0.0, "warmed"), [[0.0]])
    assert server.stop() == 0


STUCK_FINALIZE = """\
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]

    def is_ready(self):
        time.sleep(3600)
        return True

    def finalize(self):
        time.sleep(3600)
"""
STUCK_INITIALIZE = """\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(3600)

    def execute(self, requests):
        return []
"""


def _stuck_config(name: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )


def test_a_finalize_that_hangs_holds_the_stop_no_longer_than_the_exit_timeout(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The models' unloads get what the requests in flight left of --exit-timeout-secs (at
    least 1 s); a finalize still running then is left behind, and its worker process exits as
    it sees the server gone. Before, the stop waited out the execute timeout (60 s) for it; and
    a readiness check that waited on a hung is_ready then never let the process exit (its thread
    waited for the model's process, which waited for the server to be gone)."""
    repo = tmp_path / "models"
    config = _stuck_config("stuck_finalize")
    models.write_python_model(repo, "stuck_finalize", STUCK_FINALIZE, config)
    server = start_server(repo, "--exit-timeout-secs", "3")
    assert server.process is not None
    workers = child_pids(server.process.pid)
    assert workers
    with (
        grpcclient.InferenceServerClient(server.url) as client,
        pytest.raises(InferenceServerException),
    ):
        client.is_model_ready("stuck_finalize", client_timeout=0.5)  # is_ready now hangs
    started = time.monotonic()
    assert server.stop() == 0, server.log()
    assert time.monotonic() - started < 10
    assert "models still unloading" in server.log()
    _wait_until(lambda: not any(alive(pid) for pid in workers))


def test_a_load_whose_initialize_hangs_does_not_hold_the_exit(
    start_server: StartServer, tmp_path: Path
) -> None:
    """A server stopped while a model's initialize hangs (an explicit load in progress) exits at
    once, its model's process with it. Before, it logged "stopped" and then waited for the
    load's thread, up to the initialize timeout (300 s)."""
    repo = tmp_path / "models"
    config = _stuck_config("stuck_initialize")
    models.write_python_model(repo, "stuck_initialize", STUCK_INITIALIZE, config)
    server = start_server(repo, "--model-control-mode", "explicit")
    assert server.process is not None
    client = grpcclient.InferenceServerClient(server.url)
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(client.load_model, "stuck_initialize")
        _wait_until(lambda: bool(child_pids(server.process.pid)))  # its worker started
        workers = child_pids(server.process.pid)
        started = time.monotonic()
        assert server.stop() == 0, server.log()
        assert time.monotonic() - started < 10
        with pytest.raises(InferenceServerException):
            loading.result(timeout=10)
    client.close()
    _wait_until(lambda: not any(alive(pid) for pid in workers))
