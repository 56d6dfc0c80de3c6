"""Triton's HTTP extensions beside the core API, driven by the unchanged `tritonclient.http`:
system and CUDA shared memory (one set of regions with gRPC), trace and log settings, restricted
endpoint groups and the generate extension."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from e2e_support import SIMPLE_BYTES as BYTES
from e2e_support import ConvoyServer, StartServer, shm_inputs, shm_outputs
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from backends import cuda_available
from scripts import models


def http_client(server: ConvoyServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


@pytest.fixture(scope="module")
def http(convoy: ConvoyServer) -> Iterator[httpclient.InferenceServerClient]:
    with contextlib.closing(http_client(convoy)) as client:
        yield client


@pytest.fixture(scope="module")
def grpc(convoy: ConvoyServer) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(convoy.url)) as client:
        yield client


def post(
    server: ConvoyServer, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, str, bytes]:
    """Status, content type and body of one POST (a GET when `body` is None)."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}{path}", data=data, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def error_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call(*args, **kwargs)
    return error.value


# ---- system shared memory --------------------------------------------------------------------


@pytest.fixture
def regions(http: httpclient.InferenceServerClient) -> Iterator[tuple[str, dict[str, Any]]]:
    """Input and output regions of two FP32 [1, 16] tensors each, registered over HTTP."""
    tag = uuid.uuid4().hex[:8]
    handles = {
        kind: shm.create_shared_memory_region(f"{kind}_{tag}", f"/convoy_h{kind}_{tag}", 2 * BYTES)
        for kind in ("in", "out")
    }
    for kind in handles:
        http.register_system_shared_memory(f"{kind}_{tag}", f"/convoy_h{kind}_{tag}", 2 * BYTES)
    yield tag, handles
    for kind in handles:
        http.unregister_system_shared_memory(f"{kind}_{tag}")
    for handle in handles.values():
        shm.destroy_shared_memory_region(handle)


def test_inputs_and_outputs_through_shared_memory_over_http(
    http: httpclient.InferenceServerClient, regions: tuple[str, dict[str, Any]]
) -> None:
    tag, handles = regions
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, np.float32)
    shm.set_shared_memory_region(handles["in"], [a, b])
    requested = shm_outputs(httpclient, f"out_{tag}")
    result = http.infer("simple", shm_inputs(httpclient, f"in_{tag}"), outputs=requested)
    outputs = result.get_response()["outputs"]
    # As Triton's: the outputs written to shared memory are not in the body.
    assert outputs == [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]},
        {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 16]},
    ]
    written = shm.get_contents_as_numpy(handles["out"], np.float32, [2, 16])
    np.testing.assert_array_equal(written[0], (a + b)[0])
    np.testing.assert_array_equal(written[1], (a - b)[0])

    # One shared memory input beside a binary one, and the outputs in the body.
    second = httpclient.InferInput("INPUT1", [1, 16], "FP32")
    second.set_data_from_numpy(np.ones((1, 16), np.float32))
    mixed = http.infer("simple", [shm_inputs(httpclient, f"in_{tag}")[0], second])
    np.testing.assert_array_equal(mixed.as_numpy("OUTPUT0"), a + 1)

    status = {region["name"]: region for region in http.get_system_shared_memory_status()}
    assert status[f"in_{tag}"] == {
        "name": f"in_{tag}",
        "key": f"/convoy_hin_{tag}",
        "offset": 0,
        "byte_size": 2 * BYTES,
    }
    assert http.get_system_shared_memory_status(f"out_{tag}") == [status[f"out_{tag}"]]


def test_one_registry_for_grpc_and_http(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    tag = uuid.uuid4().hex[:8]
    handle = shm.create_shared_memory_region(f"both_{tag}", f"/convoy_both_{tag}", 32)
    try:
        grpc.register_system_shared_memory(f"g_{tag}", f"/convoy_both_{tag}", 16, offset=16)
        (seen,) = http.get_system_shared_memory_status(f"g_{tag}")
        assert seen == {
            "name": f"g_{tag}",
            "key": f"/convoy_both_{tag}",
            "offset": 16,
            "byte_size": 16,
        }
        http.register_system_shared_memory(f"h_{tag}", f"/convoy_both_{tag}", 32)
        grpc_status = grpc.get_system_shared_memory_status(as_json=True)["regions"]
        assert grpc_status[f"h_{tag}"]["key"] == f"/convoy_both_{tag}"
        http.unregister_system_shared_memory(f"g_{tag}")
        grpc.unregister_system_shared_memory(f"h_{tag}")
        names = {region["name"] for region in http.get_system_shared_memory_status()}
        assert not names & {f"g_{tag}", f"h_{tag}"}
    finally:
        shm.destroy_shared_memory_region(handle)


def test_shared_memory_faults_are_bad_requests_and_the_server_goes_on(
    http: httpclient.InferenceServerClient,
    convoy: ConvoyServer,
    regions: tuple[str, dict[str, Any]],
) -> None:
    tag, handles = regions
    beyond = error_of(http.infer, "simple", shm_inputs(httpclient, f"in_{tag}", BYTES + 4))
    assert (beyond.status(), "fall outside" in beyond.message()) == ("400", True)
    unknown = error_of(http.infer, "simple", shm_inputs(httpclient, "in_nope"))
    assert unknown.status() == "400"
    assert "Unable to find shared memory region: 'in_nope'" in unknown.message()
    half = shm_outputs(httpclient, f"out_{tag}", BYTES // 2)
    too_small = error_of(http.infer, "simple", shm_inputs(httpclient, f"in_{tag}"), outputs=half)
    assert (too_small.status(), "needs 64 bytes" in too_small.message()) == ("400", True)
    for call, args in (
        (http.get_system_shared_memory_status, ("nope",)),
        (http.register_system_shared_memory, ("huge", f"/convoy_hin_{tag}", 1 << 30)),
        (http.register_system_shared_memory, (f"in_{tag}", f"/convoy_hin_{tag}", BYTES)),
        (http.register_system_shared_memory, ("escape", "/../etc/passwd", 8)),
    ):
        assert error_of(call, *args).status() == "400", (call, args)
    status, _, body = post(convoy, "/v2/systemsharedmemory/region/x/register", {"key": "/k"})
    assert (status, "byte_size" in json.loads(body)["error"]) == (400, True)

    shm.set_shared_memory_region(handles["in"], [np.ones((1, 16), np.float32)] * 2)
    result = http.infer("simple", shm_inputs(httpclient, f"in_{tag}"))  # still serving
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, np.float32))


def test_cuda_shared_memory_without_a_gpu_is_refused_as_over_grpc(
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
    convoy: ConvoyServer,
) -> None:
    if cuda_available():
        pytest.skip("checks the behaviour without a usable GPU")
    with pytest.raises(InferenceServerException) as refused:
        grpc.get_cuda_shared_memory_status("r")
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    over_http = error_of(http.get_cuda_shared_memory_status, "r")
    assert (over_http.status(), over_http.message()) == ("501", refused.value.message())
    assert error_of(http.unregister_cuda_shared_memory, "r").status() == "501"
    # Registering is refused as over gRPC, a well-formed body (tritonclient's) or not.
    handle = base64.b64encode(bytes(64)).decode("ascii")
    registered = error_of(http.register_cuda_shared_memory, "r", handle, 0, 8)
    assert (registered.status(), registered.message()) == ("501", refused.value.message())
    assert "CUDA shared memory needs a CUDA device" in registered.message()
    status, _, _ = post(convoy, "/v2/cudasharedmemory/region/r/register", {"byte_size": 8})
    assert status == 501
    # Listing and unregistering all regions succeed on both: there are none.
    assert len(grpc.get_cuda_shared_memory_status().regions) == 0
    grpc.unregister_cuda_shared_memory()
    assert http.get_cuda_shared_memory_status() == []
    http.unregister_cuda_shared_memory()


def test_both_front_ends_advertise_the_same_extensions(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    over_http = http.get_server_metadata()["extensions"]
    over_grpc = list(grpc.get_server_metadata().extensions)
    assert sorted(over_http) == sorted([*over_grpc, "binary_tensor_data"])
    assert ("cuda_shared_memory" in over_http) == cuda_available()


# ---- trace and log settings ------------------------------------------------------------------


@pytest.fixture
def own_server(start_server: StartServer, tmp_path: Path) -> ConvoyServer:
    """A server of its own (its settings change), serving `simple` with rate=7 and count=3."""
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    return start_server(repo, "--trace-config", "rate=7", "--trace-config", "count=3")


def test_trace_settings_over_http_are_the_grpc_ones(own_server: ConvoyServer) -> None:
    expected = {
        "trace_level": ["OFF"],
        "trace_rate": "7",
        "trace_count": "3",
        "trace_mode": "opentelemetry",
    }
    with (
        contextlib.closing(http_client(own_server)) as http,
        contextlib.closing(grpcclient.InferenceServerClient(own_server.url)) as grpc,
    ):
        assert http.get_trace_settings() == expected
        assert http.get_trace_settings(model_name="simple") == expected
        assert http.update_trace_settings(settings={}) == expected  # nothing to change
        over_grpc = grpc.get_trace_settings(as_json=True)["settings"]
        assert {key: value["value"] for key, value in over_grpc.items()} == {
            key: value if isinstance(value, list) else [value] for key, value in expected.items()
        }
        refused = error_of(http.update_trace_settings, settings={"trace_rate": "1"})
        assert (refused.status(), "--trace-config" in refused.message()) == ("501", True)
        unknown = error_of(http.get_trace_settings, model_name="nope")
        assert (unknown.status(), unknown.message()) == ("400", "Request for unknown model : nope")


def test_log_settings_round_trip_over_http(own_server: ConvoyServer) -> None:
    with (
        contextlib.closing(http_client(own_server)) as http,
        contextlib.closing(grpcclient.InferenceServerClient(own_server.url)) as grpc,
    ):
        assert http.get_log_settings() == {
            "log_file": "",
            "log_info": True,
            "log_warning": True,
            "log_error": True,
            "log_verbose_level": 0,
            "log_format": "default",
        }
        changed = http.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
        assert (changed["log_verbose_level"], changed["log_format"]) == (1, "ISO8601")
        assert http.get_log_settings() == changed
        over_grpc = grpc.get_log_settings(as_json=True)["settings"]  # one LogControl
        assert over_grpc["log_format"]["string_param"] == "ISO8601"
        assert over_grpc["log_verbose_level"]["uint32_param"] == 1
        assert error_of(http.update_log_settings, {"log_format": "xml"}).status() == "400"
        # As Triton's, the log moves to another file at run time, and back to stderr with "".
        moved = own_server.log_path.with_name("moved.log")
        assert http.update_log_settings({"log_file": str(moved)})["log_file"] == str(moved)
        assert http.update_log_settings({"log_file": ""})["log_file"] == ""
        assert moved.is_file()
        assert (
            error_of(http.update_log_settings, {"log_file": "/no/such/dir/x.log"}).status() == "500"
        )
        changed = http.get_log_settings()
        assert http.update_log_settings({"log_info": None}) == changed  # null changes nothing


# ---- restricted endpoint groups --------------------------------------------------------------


def test_restricted_groups_need_their_header(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    server = start_server(
        repo,
        "--http-restricted-api",
        "inference,shared-memory:infer-key=secret",
        "--http-restricted-api",
        "logging:admin-key=root",
    )
    expected = "This API is restricted, expecting header '{}'"
    a = np.ones((1, 16), np.float32)
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    with contextlib.closing(http_client(server)) as http:
        for headers in (None, {"infer-key": "wrong"}, {"admin-key": "secret"}):
            for call, args in (
                (http.infer, ("simple", inputs)),
                (http.get_system_shared_memory_status, ()),
                (http.unregister_system_shared_memory, ()),
            ):
                refused = error_of(call, *args, headers=headers)
                assert refused.status() == "403", (call, headers)
                assert refused.message() == expected.format("infer-key")
        refused = error_of(http.get_log_settings)
        assert (refused.status(), refused.message()) == ("403", expected.format("admin-key"))
        status, _, body = post(server, "/v2/models/simple/generate", {"INPUT0": a[0].tolist()})
        assert (status, json.loads(body)) == (403, {"error": expected.format("infer-key")})

        key = {"Infer-Key": "secret"}  # header names are case-insensitive
        result = http.infer("simple", inputs, headers=key)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        assert http.get_system_shared_memory_status(headers=key) == []
        assert http.get_log_settings(headers={"admin-key": "root"})["log_info"] is True
        # The other groups stay open, and gRPC is not restricted by the HTTP flag.
        assert http.is_server_ready() and http.is_model_ready("simple")
        assert http.get_model_config("simple")["name"] == "simple"
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as grpc:
        grpc_inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in grpc_inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(grpc.infer("simple", grpc_inputs).as_numpy("OUTPUT0"), a + a)
    assert server.stop() == 0


# ---- generate --------------------------------------------------------------------------------


def simple_body(seed: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, 16)).astype(np.float32)
    return {"INPUT0": a.tolist(), "INPUT1": b.tolist()}, a, b


@pytest.mark.parametrize("path", ["/v2/models/simple", "/v2/models/simple/versions/1"])
def test_generate_answers_one_json_object(convoy: ConvoyServer, path: str) -> None:
    body, a, b = simple_body(1)
    status, content_type, answer = post(convoy, f"{path}/generate", {**body, "id": "g-1"})
    assert (status, content_type.split(";")[0]) == (200, "application/json"), answer
    parsed = json.loads(answer)
    assert (parsed["model_name"], parsed["model_version"], parsed["id"]) == ("simple", "1", "g-1")
    np.testing.assert_array_equal(np.array(parsed["OUTPUT0"], np.float32), a + b)
    np.testing.assert_array_equal(np.array(parsed["OUTPUT1"], np.float32), a - b)


def test_generate_stream_sends_one_event(convoy: ConvoyServer) -> None:
    body, a, b = simple_body(2)
    status, content_type, stream = post(convoy, "/v2/models/simple/generate_stream", body)
    assert (status, content_type) == (200, "text/event-stream; charset=utf-8"), stream
    events = stream.decode("utf-8").split("\n\n")
    assert events[-1] == "" and len(events) == 2  # exactly one event, for a non-decoupled model
    assert events[0].startswith("data: ")
    parsed = json.loads(events[0][len("data: ") :])
    np.testing.assert_array_equal(np.array(parsed["OUTPUT0"], np.float32), a + b)


def test_generate_text_scalars_and_parameters(convoy: ConvoyServer) -> None:
    # identity_bytes takes BYTES [-1, -1]: a scalar is a [1, 1] tensor and comes back as one.
    request = {"INPUT0": "naïve", "max_tokens": 8, "parameters": {"temperature": 0.5}}
    status, _, answer = post(convoy, "/v2/models/identity_bytes/generate", request)
    assert status == 200, answer
    assert json.loads(answer)["OUTPUT0"] == "naïve"


def test_generate_errors_answer_their_codes(convoy: ConvoyServer) -> None:
    body, _, _ = simple_body(3)
    cases = [
        ("simple", {**body, "INPUT9": [1.0, 2.0]}, 400, "parameter 'INPUT9' has invalid type"),
        ("simple", {"INPUT0": body["INPUT0"]}, 400, "missing required input(s) ['INPUT1']"),
        ("simple", {**body, "INPUT1": [1.0] * 15}, 400, "cannot fill a tensor of shape [-1, 16]"),
        ("no_such_model", body, 404, "no_such_model"),
    ]
    for model, request, code, message in cases:
        for kind in ("generate", "generate_stream"):
            status, content_type, answer = post(convoy, f"/v2/models/{model}/{kind}", request)
            assert (status, content_type.split(";")[0]) == (code, "application/json"), answer
            assert message in json.loads(answer)["error"], (model, kind)


def test_an_http_client_that_leaves_takes_its_queued_request_with_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    """As over gRPC: an inference request whose HTTP client closed the connection while it
    waited in the queue is never executed; the request before it is answered."""
    repo = tmp_path / "repo"
    models.write_sleepy(repo)
    server = start_server(repo)
    url = f"127.0.0.1:{server.http_port}"

    def body(seconds: float) -> bytes:
        inputs = [{"name": "X", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]
        return json.dumps({"inputs": inputs}).encode()

    with httpclient.InferenceServerClient(url, network_timeout=30) as http:
        running = http.async_infer("sleepy", [_sleep_input(1.0)])  # holds the one instance
        time.sleep(0.3)
        sent = body(0.0)
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as client:
            client.sendall(
                b"POST /v2/models/sleepy/infer HTTP/1.1\r\nHost: localhost\r\n"
                + f"Content-Length: {len(sent)}\r\n\r\n".encode()
                + sent
            )
            time.sleep(0.2)  # queued behind the running batch; then the client goes
        assert running.get_result().as_numpy("Y").tolist() == [[1.0]]
        time.sleep(0.3)
        stats = http.get_inference_statistics("sleepy")["model_stats"][0]
    assert stats["execution_count"] == 1, stats  # the queued request never ran


def _sleep_input(seconds: float) -> httpclient.InferInput:
    tensor = httpclient.InferInput("X", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[seconds]], np.float32))
    return tensor
