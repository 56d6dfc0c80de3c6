"""What a model.py of a recent Triton (2.54-2.67) relies on, end to end in both python modes: its
own `is_ready()` deciding ModelReady and /v2/models/<m>/ready, and response parameters reaching
the client (gRPC, HTTP, a stream) and a BLS caller."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import queue
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import PYTHON_MODES, ConvoyServer, StartServer, infer_input, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import models

# Ready while the file its config names exists; `style` says how is_ready answers otherwise.
READINESS = """
import asyncio
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.flag = parameters["flag"]["string_value"]
        self.style = parameters["style"]["string_value"]

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]

    def _answer(self):
        if self.style == "raises":
            raise RuntimeError("the readiness check failed on purpose")
        if self.style == "not_bool":
            return "ready"
        if self.style == "slow":
            time.sleep(6)  # past the 5 s the server waits
        return os.path.exists(self.flag)

    {definition}
"""
SYNC = "def is_ready(self):\n        return self._answer()"
ASYNC = (
    "async def is_ready(self):\n        await asyncio.sleep(0.01)\n        return self._answer()"
)

# Answers response parameters; a negative input asks for a float one, which Triton refuses.
PARAMETERS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            n = int(x.ravel()[0])
            shown = {"bool": True, "str": "Hello World!", "int": 1024, "n": n}
            if n < 0:
                shown["float"] = 0.5
            y = pb_utils.Tensor("Y", x)
            responses.append(pb_utils.InferenceResponse([y], parameters=shown))
        return responses
"""

# Streams two responses with parameters, then a bare final flag.
STREAM_PARAMETERS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            y = pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy())
            for index in range(2):
                sender.send(pb_utils.InferenceResponse([y], parameters={"index": index}))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

# Calls `parameters` with exec and async_exec; answers what each response's parameters() showed.
BLS_PARAMETERS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="parameters",
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
                requested_output_names=["Y"],
            )
            shown = [call.exec().parameters(), (await call.async_exec()).parameters()]
            out = pb_utils.Tensor("SHOWN", np.array([[json.dumps(shown)]], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out], parameters={"from": "caller"}))
        return responses
"""

# Streams up to 100 responses (parameters {"i": i}), 20 ms apart, from a thread of its own after
# execute returned (Triton's usual decoupled pattern), until its caller cancels; then writes what
# it saw to the file its config names and sends the final flag.
COUNTER = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.marker = parameters["marker"]["string_value"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._stream, args=(request,)).start()
        return None

    def _stream(self, request):
        sender = request.get_response_sender()
        sent = 0
        if pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0] < 0:
            deadline = time.monotonic() + 10  # silent: nothing sent until its caller leaves
            while not request.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.02)
        while sent < 100 and not request.is_cancelled():
            y = pb_utils.Tensor("Y", np.array([float(sent)], dtype=np.float32))
            sender.send(pb_utils.InferenceResponse([y], parameters={"i": sent}))
            sent += 1
            time.sleep(0.02)
        with open(self.marker, "w") as out:
            out.write(f"{request.is_cancelled()} {sent}")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

# Takes two responses of `counter` through a decoupled BLS call, cancels it, and drains the rest.
BLS_CANCEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="counter",
                inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
                requested_output_names=["Y"],
            )
            stream = call.exec(decoupled=True)
            first = [next(stream), next(stream)]
            stream.cancel()
            rest = list(stream)
            shown = {
                "values": [float(r.output_tensors()[0].as_numpy()[0]) for r in first],
                "parameters": [json.loads(r.parameters()) for r in first],
                "rest": len(rest),
                "ended_with": rest[-1].error().message() if rest and rest[-1].has_error() else "",
            }
            out = pb_utils.Tensor("SHOWN", np.array([[json.dumps(shown)]], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

# Triton's decoupled pattern: execute returns at once, a thread of the model sends the response
# after asking is_cancelled() (and its BLS-free answer) a few times.
BACKGROUND = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._answer, args=(request,)).start()
        return None

    def _answer(self, request):
        seen = []
        for _ in range(3):
            seen.append(request.is_cancelled())
            time.sleep(0.01)
        y = np.array([float(sum(seen))], dtype=np.float32)
        sender = request.get_response_sender()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

IDENTITY_IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
)
READINESS_STYLES = ("sync", "async", "raises", "not_bool", "slow")


def _string(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for style in READINESS_STYLES:
        source = READINESS.replace("{definition}", ASYNC if style == "async" else SYNC)
        config = f'name: "ready_{style}"\nbackend: "python"\nmax_batch_size: 0\n' + IDENTITY_IO
        config += _string("flag", str(tmp_path / f"{style}.flag")) + _string("style", style)
        models.write_python_model(repo, f"ready_{style}", source, config)
    models.write_python_model(
        repo,
        "parameters",
        PARAMETERS,
        'name: "parameters"\nbackend: "python"\nmax_batch_size: 0\n' + IDENTITY_IO,
    )
    models.write_python_model(
        repo,
        "stream_parameters",
        STREAM_PARAMETERS,
        'name: "stream_parameters"\nbackend: "python"\nmax_batch_size: 0\n'
        + IDENTITY_IO
        + "model_transaction_policy { decoupled: true }\n",
    )
    models.write_python_model(
        repo,
        "bls_parameters",
        BLS_PARAMETERS,
        'name: "bls_parameters"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "SHOWN" data_type: TYPE_STRING dims: [ 1, 1 ] } ]\n',
    )
    models.write_python_model(
        repo,
        "counter",
        COUNTER,
        'name: "counter"\nbackend: "python"\nmax_batch_size: 0\n'
        + IDENTITY_IO
        + "model_transaction_policy { decoupled: true }\n"
        + _string("marker", str(tmp_path / "counter.marker")),
    )
    models.write_python_model(
        repo,
        "background",
        BACKGROUND,
        'name: "background"\nbackend: "python"\nmax_batch_size: 0\n'
        + IDENTITY_IO
        + "model_transaction_policy { decoupled: true }\n",
    )
    models.write_python_model(
        repo,
        "bls_cancel",
        BLS_CANCEL,
        'name: "bls_cancel"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "SHOWN" data_type: TYPE_STRING dims: [ 1, 1 ] } ]\n',
    )
    return repo


@pytest.fixture(scope="module", params=PYTHON_MODES)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ConvoyServer, Path]]:
    """One server per python mode for the module's tests, and where its models' flags lie."""
    where = tmp_path_factory.mktemp("recent")
    repo = place_python_models(_repository(where), request.param)
    server = ConvoyServer(repo, where / "server.log").start()
    yield server, where
    server.kill()


@pytest.fixture
def server(served: tuple[ConvoyServer, Path]) -> ConvoyServer:
    return served[0]


@pytest.fixture
def flags(served: tuple[ConvoyServer, Path]) -> Path:
    return served[1]


def _ready(server: ConvoyServer, model: str) -> tuple[bool, bool]:
    """(gRPC ModelReady, HTTP /v2/models/<m>/ready), asked at the same time."""
    with (
        grpcclient.InferenceServerClient(server.url) as grpc_client,
        httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http_client,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        grpc_answer = pool.submit(grpc_client.is_model_ready, model)
        http_answer = pool.submit(http_client.is_model_ready, model)
        return bool(grpc_answer.result()), bool(http_answer.result())


def test_is_ready_decides_model_readiness_as_it_flips(server: ConvoyServer, flags: Path) -> None:
    x = np.array([3.0], np.float32)
    for style in ("sync", "async"):
        model, flag = f"ready_{style}", flags / f"{style}.flag"
        assert _ready(server, model) == (False, False)
        flag.touch()
        assert _ready(server, model) == (True, True)
        flag.unlink()
        assert _ready(server, model) == (False, False)
        # Readiness is the model's word to balancers: inference goes on regardless.
        with grpcclient.InferenceServerClient(server.url) as triton:
            result = triton.infer(model, [infer_input("X", x, "FP32")])
            np.testing.assert_array_equal(result.as_numpy("Y"), x)
    for style in ("raises", "not_bool"):
        (flags / f"{style}.flag").touch()
        assert _ready(server, f"ready_{style}") == (False, False)
    with grpcclient.InferenceServerClient(server.url) as triton:
        # A model without is_ready stays ready, and the server as a whole is unaffected.
        assert triton.is_model_ready("parameters") and triton.is_server_ready()


def test_an_is_ready_past_its_timeout_answers_not_ready(server: ConvoyServer, flags: Path) -> None:
    (flags / "slow.flag").touch()
    assert _ready(server, "ready_slow") == (False, False)  # both wait on one call, 5 s
    x = np.array([1.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("ready_slow", [infer_input("X", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("Y"), x)


def test_response_parameters_reach_the_client_on_both_protocols(server: ConvoyServer) -> None:
    expected = {"bool": True, "str": "Hello World!", "int": 1024, "n": 7}
    x = np.array([7.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        answer = triton.infer("parameters", [infer_input("X", x, "FP32")]).get_response()
        shown = {
            key: getattr(value, value.WhichOneof("parameter_choice"))
            for key, value in answer.parameters.items()
        }
        assert shown == expected
        with pytest.raises(InferenceServerException) as refused:
            triton.infer("parameters", [infer_input("X", -x, "FP32")])
        assert (
            "Expect parameters values to have type bool/int/str, found type <class 'float'>"
            in refused.value.message()
        )
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http_client:
        http_input = httpclient.InferInput("X", [1], "FP32")
        http_input.set_data_from_numpy(x)
        assert http_client.infer("parameters", [http_input]).get_response()["parameters"] == (
            expected
        )


def test_response_parameters_cross_front_end_workers(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "parameters",
        PARAMETERS,
        'name: "parameters"\nbackend: "python"\nmax_batch_size: 0\n' + IDENTITY_IO,
    )
    server = start_server(repo, "--frontend-workers", "2")
    x = np.array([3.0], np.float32)
    expected = {"bool": True, "str": "Hello World!", "int": 1024, "n": 3}
    with grpcclient.InferenceServerClient(server.url) as triton:
        answer = triton.infer("parameters", [infer_input("X", x, "FP32")]).get_response()
        assert answer.parameters["n"].int64_param == 3
        assert answer.parameters["str"].string_param == "Hello World!"
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http_client:
        http_input = httpclient.InferInput("X", [1], "FP32")
        http_input.set_data_from_numpy(x)
        assert http_client.infer("parameters", [http_input]).get_response()["parameters"] == (
            expected
        )


def test_a_streamed_response_carries_its_parameters(server: ConvoyServer) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    x = np.array([1.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: answers.put((result, error)))
        triton.async_stream_infer("stream_parameters", [infer_input("X", x, "FP32")])
        received = [answers.get(timeout=10) for _ in range(2)]
        triton.stop_stream()
    for index, (result, error) in enumerate(received):
        assert error is None
        assert isinstance(result, grpcclient.InferResult)
        parameters = result.get_response().parameters
        assert parameters["index"].int64_param == index
        assert parameters["triton_final_response"].bool_param is False


def test_a_bls_response_shows_the_called_models_parameters(server: ConvoyServer) -> None:
    x = np.array([5.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("bls_parameters", [infer_input("X", x, "FP32")])
        shown = [json.loads(text) for text in json.loads(result.as_numpy("SHOWN")[0, 0])]
        assert result.get_response().parameters["from"].string_param == "caller"
    expected = {"bool": True, "str": "Hello World!", "int": 1024, "n": 5}
    assert shown == [expected, expected]


def test_a_decoupled_bls_call_is_cancelled_and_the_called_model_sees_it(
    server: ConvoyServer, flags: Path
) -> None:
    x = np.array([1.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("bls_cancel", [infer_input("X", x, "FP32")])
    shown = json.loads(result.as_numpy("SHOWN")[0, 0])
    assert shown["values"] == [0.0, 1.0]
    assert shown["parameters"] == [{"i": 0}, {"i": 1}]
    # After cancel() the stream ends with an error response saying so.
    assert shown["rest"] >= 1 and "cancelled" in shown["ended_with"]
    marker = flags / "counter.marker"
    deadline_s = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline_s:
        time.sleep(0.05)
    observed, sent = marker.read_text().split()
    assert observed == "True" and 2 <= int(sent) < 100  # it stopped, seeing is_cancelled()


def test_is_cancelled_from_a_thread_after_execute_returned_answers(server: ConvoyServer) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    x = np.array([1.0], np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: answers.put((result, error)))
        triton.async_stream_infer("background", [infer_input("X", x, "FP32")])
        result, error = answers.get(timeout=10)
        triton.stop_stream()
    assert error is None and isinstance(result, grpcclient.InferResult)
    assert result.as_numpy("Y").tolist() == [0.0]  # never cancelled, and no hang


def test_an_http_stream_the_client_leaves_ends_and_the_model_sees_it(
    server: ConvoyServer, flags: Path
) -> None:
    marker = flags / "counter.marker"
    marker.unlink(missing_ok=True)
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/counter/generate_stream",
        data=json.dumps({"X": 1.0}).encode(),
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        events = 0
        while events < 2:  # two responses, then the client goes away
            events += answer.readline().startswith(b"data: ")
    deadline_s = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline_s:
        time.sleep(0.05)
    observed, sent = marker.read_text().split()
    assert observed == "True" and 2 <= int(sent) < 100  # it stopped, seeing is_cancelled()


def test_an_http_stream_the_client_leaves_before_any_event_ends_too(
    server: ConvoyServer, flags: Path
) -> None:
    """The same when the model has sent nothing yet: the server sees the client go."""
    marker = flags / "counter.marker"
    marker.unlink(missing_ok=True)
    body = json.dumps({"X": -1.0}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as client:
        client.sendall(
            b"POST /v2/models/counter/generate_stream HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.3)  # the model is running, silent
    deadline_s = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline_s:
        time.sleep(0.05)
    assert marker.exists(), "the model never saw its caller leave"
    observed, sent = marker.read_text().split()
    assert (observed, sent) == ("True", "0")


def _put_answer(answers: queue.Queue[object], result: object, error: object) -> None:
    answers.put(error or result)


def test_streams_cancelled_while_a_model_streams_leave_nothing_pending(
    server: ConvoyServer, flags: Path
) -> None:
    """Eight gRPC streams, four requests each, cancelled while `counter` streams to them: the
    server lets go of what each request waited on (no task left pending for the collector to
    find) and serves on."""
    x = np.array([1.0], np.float32)
    for _ in range(8):
        answers: queue.Queue[object] = queue.Queue()  # this stream's, not the one's before
        with grpcclient.InferenceServerClient(server.url) as triton:
            triton.start_stream(functools.partial(_put_answer, answers))
            for _ in range(4):
                triton.async_stream_infer("counter", [infer_input("X", x, "FP32")])
            for _ in range(2):
                assert not isinstance(answers.get(timeout=10), InferenceServerException)
            triton.stop_stream(cancel_requests=True)
    with grpcclient.InferenceServerClient(server.url) as triton:
        for _ in range(300):  # work enough for the server's garbage collector to run
            y = triton.infer("parameters", [infer_input("X", x, "FP32")]).as_numpy("Y")
            np.testing.assert_array_equal(y, x)
    assert "Task was destroyed but it is pending" not in server.log()
