"""Triton's options that change what the endpoints answer: --id over both protocols, header
forwarding, --http-max-input-size (after decompression too), --allow-client-shm off, the summary
metrics, response compression, --allow-grpc=false, --reuse-*-port and --log-file. In process
and with front-end workers."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import (
    ECHO_PARAMETERS_MODEL,
    ConvoyServer,
    StartServer,
    infer_input,
    serve_command,
    simple_inputs,
)
from onnx import TensorProto
from triton_support import CountingProxy, Started, free_ports, http_get, http_status
from tritonclient.utils import InferenceServerException

from scripts import models

LIMIT_BYTES = 65536
SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
ZEROS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("Z", np.zeros((1, 262144), np.float32))]
            )
            for _ in requests
        ]
"""


def write_repository(repo: Path) -> Path:
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    models.write_python_model(
        repo,
        "echo",
        ECHO_PARAMETERS_MODEL,
        'name: "echo"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] },'
        ' { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    )
    models.write_python_model(
        repo,
        "zeros",
        ZEROS_MODEL,
        'name: "zeros"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Z" data_type: TYPE_FP32 dims: [ 1, 262144 ] } ]\n',
    )
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConvoyServer]:
    folder = tmp_path_factory.mktemp("triton-options")
    flags = [
        "--id=edge-7",
        "--grpc-header-forward-pattern=^x-fwd-",
        "--http-header-forward-pattern=^x-fwd-",
        f"--http-max-input-size={LIMIT_BYTES}",
        "--allow-client-shm=false",
        "--metrics-config=summary_latencies=true",
        "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
        "--grpc-infer-response-compression-level=high",
    ]
    started = ConvoyServer(write_repository(folder / "repo"), folder / "server.log", *flags)
    started.start()
    try:
        yield started
    finally:
        started.kill()


@pytest.fixture
def client(server: ConvoyServer) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as opened:
        yield opened


@pytest.fixture
def http(server: ConvoyServer) -> Iterator[httpclient.InferenceServerClient]:
    with contextlib.closing(
        httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    ) as opened:
        yield opened


def test_server_metadata_reports_the_id_over_both_protocols(
    client: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient
) -> None:
    assert client.get_server_metadata().name == "edge-7"
    assert http.get_server_metadata()["name"] == "edge-7"


def test_matching_headers_reach_the_model_as_parameters(
    client: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient
) -> None:
    x = np.ones((1, 1), np.float32)
    headers = {"x-fwd-tenant": "blue", "x-other": "kept out", "x-fwd-priority": "low"}
    answer = client.infer(
        "echo", [infer_input("X", x, "FP32")], headers=headers, parameters={"mode": "fast"}
    )
    shown = json.loads(answer.as_numpy("PARAMETERS")[0, 0])
    assert shown == {"mode": "fast", "x-fwd-tenant": "blue", "x-fwd-priority": "low"}
    entry = httpclient.InferInput("X", [1, 1], "FP32")
    entry.set_data_from_numpy(x)
    answer = http.infer("echo", [entry], headers={"x-fwd-tenant": "green", "x-other": "no"})
    assert json.loads(answer.as_numpy("PARAMETERS")[0, 0]) == {"x-fwd-tenant": "green"}
    plain = client.infer("echo", [infer_input("X", x, "FP32")])
    assert json.loads(plain.as_numpy("PARAMETERS")[0, 0]) == {}


def _post(server: ConvoyServer, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/simple/infer", data=body, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), str(answer.read().decode())
    except urllib.error.HTTPError as error:
        return error.code, str(error.read().decode())


def _simple_request(padding: int = 0) -> bytes:
    data = list(range(16))
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [1, 16], "data": data}
        for name in ("INPUT0", "INPUT1")
    ]
    text = json.dumps({"inputs": inputs})
    return (text[:-1] + " " * padding + text[-1]).encode()  # spaces before the last brace


def test_a_body_past_http_max_input_size_gets_tritons_400(server: ConvoyServer) -> None:
    too_large = (
        f"Request size exceeds the maximum allowed value of {LIMIT_BYTES} bytes. Use "
        "--http-max-input-size to increase the limit."
    )
    status, text = _post(server, _simple_request(padding=LIMIT_BYTES), {})
    assert (status, json.loads(text)["error"]) == (400, too_large)
    # A gzip body far smaller than the limit that inflates past it: refused as it inflates.
    bomb = gzip.compress(_simple_request(padding=LIMIT_BYTES * 16))
    assert len(bomb) < LIMIT_BYTES // 8
    status, text = _post(server, bomb, {"Content-Encoding": "gzip"})
    assert (status, json.loads(text)["error"]) == (400, too_large)
    # Under the limit once inflated, a compressed request is served.
    status, text = _post(server, gzip.compress(_simple_request()), {"Content-Encoding": "gzip"})
    assert status == 200
    assert json.loads(text)["outputs"][0]["data"] == [2.0 * i for i in range(16)]


def _status_of(call: object, *args: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as refused:
        call(*args)  # type: ignore[operator]
    return refused.value


def test_client_shared_memory_off_refuses_regions_with_tritons_words(
    client: grpcclient.InferenceServerClient, http: httpclient.InferenceServerClient
) -> None:
    for call, args in (
        (client.register_system_shared_memory, ("region", "/convoy-none", 64)),
        (client.unregister_system_shared_memory, ()),
        (client.register_cuda_shared_memory, ("gpu", b"\0" * 64, 0, 64)),
        (client.unregister_cuda_shared_memory, ()),
    ):
        error = _status_of(call, *args)
        assert (error.status(), error.message()) == ("StatusCode.UNAVAILABLE", SHM_DISABLED)
    error = _status_of(http.register_system_shared_memory, "region", "/convoy-none", 64)
    assert (error.status(), error.message()) == ("503", SHM_DISABLED)
    assert client.get_system_shared_memory_status(as_json=True) == {}
    inputs, a, b = simple_inputs(1)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)


def _samples(page: str, family: str) -> dict[str, float]:
    """`labels -> value` of one family's samples on a Prometheus page."""
    pattern = re.compile(rf"^{family}\{{([^}}]*)\}} (\S+)$", re.MULTILINE)
    return {labels: float(value) for labels, value in pattern.findall(page)}


def test_summaries_give_quantiles_of_the_last_minute(
    server: ConvoyServer, client: grpcclient.InferenceServerClient
) -> None:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    before = http_get(url)  # the first scrape starts the windows
    assert "# TYPE nv_inference_request_summary_us summary" in before
    inputs, _, _ = simple_inputs(1)
    for _ in range(5):
        client.infer("simple", inputs)
    page = http_get(url)
    for family in (
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_input_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_compute_output_summary_us",
    ):
        quantiles = _samples(page, family)
        median = quantiles['model="simple",quantile="0.5",version="1"']
        assert not math.isnan(median) and median >= 0
        assert 'model="simple",quantile="0.99",version="1"' in quantiles
        assert _samples(page, f"{family}_count")['model="simple",version="1"'] >= 5
    request = _samples(page, "nv_inference_request_summary_us")
    assert request['model="simple",quantile="0.5",version="1"'] > 0


def test_responses_travel_compressed(server: ConvoyServer) -> None:
    proxy = CountingProxy(server.grpc_port)
    try:
        with contextlib.closing(
            grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
        ) as client:
            x = np.ones((1,), np.float32)
            zeros = client.infer("zeros", [infer_input("X", x, "FP32")]).as_numpy("Z")
        assert zeros.shape == (1, 262144) and not zeros.any()
        assert proxy.from_server < 64 * 1024  # a MiB of zeros, compressed on the wire
    finally:
        proxy.close()


# The tests below start their own servers, with the front ends in the core process and in worker
# processes: what they check (ports bound or not, shared, the log's destination) is each process's.
WORKERS = pytest.mark.parametrize("frontend_workers", [0, 2], ids=["in-process", "workers"])


@WORKERS
def test_allow_grpc_false_really_turns_grpc_off(tmp_path: Path, frontend_workers: int) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    grpc_port, http_port = free_ports(2)
    command = serve_command(repo, "--allow-grpc=false", "--frontend-workers", str(frontend_workers))
    command += [f"--grpc-port={grpc_port}", f"--http-port={http_port}"]
    server = Started(command, tmp_path / "server.log").wait_serving()
    try:
        assert "serving without gRPC" in server.log()
        assert http_status(f"http://127.0.0.1:{http_port}/v2/health/ready") == 200
        with contextlib.closing(grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")) as c:
            error = _status_of(c.is_server_live)
        assert error.status() == "StatusCode.UNAVAILABLE"  # nothing listens there
    finally:
        server.kill()


@WORKERS
def test_reuse_ports_let_a_second_server_share_them(tmp_path: Path, frontend_workers: int) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    grpc_port, http_port = free_ports(2)
    ports = [f"--grpc-port={grpc_port}", f"--http-port={http_port}"]
    reuse = ["--reuse-grpc-port=true", "--reuse-http-port=true"]
    workers = ["--frontend-workers", str(frontend_workers)]
    servers = [
        Started(serve_command(repo, *workers) + ports + reuse, tmp_path / f"{n}.log")
        for n in ("first", "second")
    ]
    try:
        for server in servers:
            server.wait_serving()
            assert server.grpc_port == grpc_port and server.http_port == http_port
        with contextlib.closing(grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")) as c:
            inputs, a, b = simple_inputs(1)
            np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)
        # Without asking, a third is refused the port the two share.
        third = Started(serve_command(repo, *workers) + ports, tmp_path / "third.log")
        assert third.exit_code() == 1
        assert "cannot bind" in third.log()
    finally:
        for server in servers:
            server.kill()


@WORKERS
def test_log_file_takes_the_log(tmp_path: Path, frontend_workers: int) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    log_file = tmp_path / "convoy.log"
    command = serve_command(
        repo, f"--log-file={log_file}", "--frontend-workers", str(frontend_workers)
    )
    server = Started(command, tmp_path / "stderr.log", log=log_file).wait_serving()
    try:
        assert "serving gRPC on 127.0.0.1" in log_file.read_text(encoding="utf-8")
        assert "serving gRPC" not in server.stderr_path.read_text(encoding="utf-8")
    finally:
        server.kill()


# Fails its first initialize (leaving a mark beside itself), succeeds after.
FLAKY_MODEL = """
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        mark = Path(__file__).with_name("tried")
        if not mark.exists():
            mark.write_text("once")
            raise pb_utils.TritonModelException("first load fails")

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]) for x in inputs]
"""
FLAKY_CONFIG = (
    'name: "flaky"\nbackend: "python"\nmax_batch_size: 4\n'
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)


def test_model_config_name_and_load_retries(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    tuned = models.write_model(repo, "tuned", models.simple(TensorProto.FLOAT), None)
    (tuned / "configs").mkdir()
    (tuned / "configs" / "h100.pbtxt").write_text('name: "tuned"\nmax_batch_size: 2\n')
    models.write_python_model(repo, "flaky", FLAKY_MODEL, FLAKY_CONFIG)
    server = start_server(repo, "--model-config-name=h100", "--model-load-retry-count=1")
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        # configs/h100.pbtxt where the model has one, config.pbtxt (here none) elsewhere.
        assert client.get_model_config("tuned").config.max_batch_size == 2
        assert client.get_model_config("simple").config.max_batch_size == 4  # auto-complete's
        assert client.is_model_ready("flaky")  # the retry loaded it
        x = np.ones((1, 1), np.float32)
        np.testing.assert_array_equal(
            client.infer("flaky", [infer_input("X", x, "FP32")]).as_numpy("Y"), x
        )
    assert "load of model 'flaky' failed, retry 1 of 1" in server.log()
