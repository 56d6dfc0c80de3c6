"""Business logic scripting: a Python model calls other models of the server with
`pb_utils.InferenceRequest(...).exec()` / `async_exec()`, as Triton's Python backend allows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ECHO_PARAMETERS_MODEL, StartServer, infer_input, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import gen_models, models

# Calls `simple` twice (once blocking, once async) and an unknown model, per request.
PIPELINE = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            inputs = [pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)]
            first = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"], inputs=inputs
            ).exec()
            if first.has_error():
                raise pb_utils.TritonModelException(first.error().message())
            doubled = pb_utils.get_output_tensor_by_name(first, "OUTPUT0").as_numpy()
            again = [pb_utils.Tensor("INPUT0", doubled), pb_utils.Tensor("INPUT1", x)]
            second, missing = await asyncio.gather(
                pb_utils.InferenceRequest(
                    model_name="simple", requested_output_names=["OUTPUT1"], inputs=again
                ).async_exec(),
                pb_utils.InferenceRequest(
                    model_name="no_such_model", requested_output_names=["Y"], inputs=inputs
                ).async_exec(),
            )
            assert second.output_tensors()[0].name() == "OUTPUT1"
            y = pb_utils.get_output_tensor_by_name(second, "OUTPUT1").as_numpy()  # 2x - x
            error = missing.error()
            note = np.array([[f"{error.code()} {error.message()}".encode()]], dtype=object)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("Y", y), pb_utils.Tensor("NOTE", note)]
            ))
        return responses
"""

WRONG_INPUT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            # FP64 where `simple` wants FP32: the server refuses it as it would a client's.
            inputs = [pb_utils.Tensor("INPUT0", x.astype(np.float64)), pb_utils.Tensor("INPUT1", x)]
            answer = pb_utils.InferenceRequest(
                model_name="simple", requested_output_names=["OUTPUT0"], inputs=inputs
            ).exec()
            error = answer.error() if answer.has_error() else pb_utils.TritonError("no error")
            responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses
"""


# Calls `echo` (ECHO_PARAMETERS_MODEL) with parameters of its own.
ASK = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            answer = pb_utils.InferenceRequest(
                model_name="echo",
                requested_output_names=["PARAMETERS"],
                inputs=[x],
                parameters={"asked_by": "ask", "depth": 1},
            ).exec()
            shown = pb_utils.get_output_tensor_by_name(answer, "PARAMETERS").as_numpy()
            note = pb_utils.Tensor("NOTE", shown)
            y = pb_utils.Tensor("Y", x.as_numpy())
            responses.append(pb_utils.InferenceResponse(output_tensors=[y, note]))
        return responses
"""


# Runs two sequences side by side on the stateful `accumulate` (running totals), each call
# naming its sequence with a correlation id and flags, as Triton's BLS does; then continues a
# sequence that never started. Answers the totals and that call's error in NOTE.
SEQUENCES = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
END = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


def _call(correlation_id, value, flags):
    request = pb_utils.InferenceRequest(
        model_name="accumulate",
        requested_output_names=["OUTPUT"],
        inputs=[pb_utils.Tensor("INPUT", np.array([[value]], np.int32))],
        correlation_id=correlation_id,
        flags=flags,
    )
    return request.exec()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            totals = {11: [], "twelve": []}
            for step, flags in enumerate((START, 0, END)):
                for correlation_id, scale in ((11, 1), ("twelve", 10)):
                    response = _call(correlation_id, scale * (step + 1), flags)
                    output = pb_utils.get_output_tensor_by_name(response, "OUTPUT")
                    totals[correlation_id].append(int(output.as_numpy()[0, 0]))
            stray = _call(99, 1, 0)
            refusal = stray.error().message() if stray.has_error() else ""
            shown = {"totals": totals, "stray": refusal}
            x = pb_utils.get_input_tensor_by_name(request, "X")
            note = np.array([[json.dumps(shown).encode()]] * len(x.as_numpy()), dtype=np.object_)
            y = pb_utils.Tensor("Y", x.as_numpy())
            responses.append(pb_utils.InferenceResponse([y, pb_utils.Tensor("NOTE", note)]))
        return responses
"""


# Holds its one instance for a second per request.
SLOW = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1.0)
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")])
            for r in requests
        ]
"""

# Calls `slow` with a 100 ms timeout, host memory preferred and its own request's trace, as
# Triton's BLS examples write it; NOTE holds the call's error ("" when it was answered).
TIMED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            call = pb_utils.InferenceRequest(
                model_name="slow",
                requested_output_names=["X"],
                inputs=[x],
                timeout=100_000,
                preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
                trace=request.trace(),
            )
            answer = call.exec()
            error = answer.error().message() if answer.has_error() else ""
            note = np.array([[error.encode()]] * len(x.as_numpy()), dtype=np.object_)
            y = pb_utils.Tensor("Y", x.as_numpy())
            responses.append(pb_utils.InferenceResponse([y, pb_utils.Tensor("NOTE", note)]))
        return responses
"""


# Each request waits (up to 20 s) until four requests are in its instances at once; answers 1
# when they met, 0 when it waited alone.
MEET = """
import json
import os
import time
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.place = parameters["place"]["string_value"]

    def execute(self, requests):
        open(os.path.join(self.place, uuid.uuid4().hex), "w").close()
        deadline = time.monotonic() + 20
        while len(os.listdir(self.place)) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        met = float(len(os.listdir(self.place)) >= 4)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.array([met], np.float32))])]
"""

# Calls `meet` four times at once with async_exec; Y is how many calls met the others.
FAN_OUT = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        x = pb_utils.Tensor("X", np.zeros(1, np.float32))
        calls = [
            pb_utils.InferenceRequest(model_name="meet", requested_output_names=["Y"], inputs=[x])
            for _ in range(4)
        ]
        answers = await asyncio.gather(*(call.async_exec() for call in calls))
        met = sum(float(pb_utils.get_output_tensor_by_name(a, "Y").as_numpy()[0]) for a in answers)
        y = pb_utils.Tensor("Y", np.array([met], np.float32))
        return [pb_utils.InferenceResponse([y]) for _ in requests]
"""


# Decoupled: sends a first response at once, then its final one once the caller has received
# its peer's first response (a file the caller makes), or after 20 s; the final says which.
PING = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.peer_received = parameters["peer_received"]["string_value"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._answer, args=(request.get_response_sender(),)).start()

    def _answer(self, sender):
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.zeros(1, np.float32))]))
        deadline = time.monotonic() + 20
        while not os.path.exists(self.peer_received) and time.monotonic() < deadline:
            time.sleep(0.01)
        met = np.array([float(os.path.exists(self.peer_received))], np.float32)
        sender.send(
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", met)]),
            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
"""

# Pulls `ping_a` and `ping_b` on two threads at once; after each first response it marks that
# it received it, and it asks for ping_b's first only once it waits for ping_a's final. Y: how
# many of the two final responses say their peer's mark came.
PULL_BOTH = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.marks = {n: parameters[n]["string_value"] for n in ("ping_a", "ping_b")}

    def _pull(self, model, finals):
        x = pb_utils.Tensor("X", np.zeros(1, np.float32))
        call = pb_utils.InferenceRequest(model_name=model, requested_output_names=["Y"], inputs=[x])
        stream = iter(call.exec(decoupled=True))
        if model == "ping_b":  # asks only once the other thread waits for ping_a's final
            while not os.path.exists(self.marks["ping_a"]):
                time.sleep(0.01)
            time.sleep(0.3)
        next(stream)
        open(self.marks[model], "w").close()
        for response in stream:
            output = pb_utils.get_output_tensor_by_name(response, "Y")
            if output is not None:
                finals.append(float(output.as_numpy()[0]))

    def execute(self, requests):
        finals = []
        threads = [threading.Thread(target=self._pull, args=(m, finals)) for m in self.marks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        y = pb_utils.Tensor("Y", np.array([sum(finals)], np.float32))
        return [pb_utils.InferenceResponse([y]) for _ in requests]
"""


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(), None)
    gen_models.write_accumulate(repo)
    io = (
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 16 ] },'
        ' { name: "NOTE" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    )
    for name, source in (
        ("pipeline", PIPELINE),
        ("wrong_input", WRONG_INPUT),
        ("ask", ASK),
        ("sequences", SEQUENCES),
        ("timed", TIMED),
    ):
        config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 4\n{io}'
        models.write_python_model(repo, name, source, config)
    one_io = 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    one_io += 'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    place = tmp_path / "meeting"
    place.mkdir()
    meet = f'name: "meet"\nbackend: "python"\nmax_batch_size: 0\n{one_io}'
    meet += "instance_group [ { count: 4 kind: KIND_CPU } ]\n"
    meet += f'parameters {{ key: "place" value: {{ string_value: "{place}" }} }}\n'
    models.write_python_model(repo, "meet", MEET, meet)
    fan_out = f'name: "fan_out"\nbackend: "python"\nmax_batch_size: 0\n{one_io}'
    models.write_python_model(repo, "fan_out", FAN_OUT, fan_out)
    marks = {name: tmp_path / "meeting" / f"{name}.received" for name in ("ping_a", "ping_b")}
    for name, peer in (("ping_a", "ping_b"), ("ping_b", "ping_a")):
        ping = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n{one_io}'
        ping += "model_transaction_policy { decoupled: true }\n"
        ping += (
            f'parameters {{ key: "peer_received" value: {{ string_value: "{marks[peer]}" }} }}\n'
        )
        models.write_python_model(repo, name, PING, ping)
    pull = f'name: "pull_both"\nbackend: "python"\nmax_batch_size: 0\n{one_io}'
    for name, mark in marks.items():
        pull += f'parameters {{ key: "{name}" value: {{ string_value: "{mark}" }} }}\n'
    models.write_python_model(repo, "pull_both", PULL_BOTH, pull)
    slow_io = 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    slow_io += 'output [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    slow = f'name: "slow"\nbackend: "python"\nmax_batch_size: 1\n{slow_io}dynamic_batching {{ }}\n'
    models.write_python_model(repo, "slow", SLOW, slow)
    echo_io = io.replace('"NOTE"', '"PARAMETERS"')
    echo = f'name: "echo"\nbackend: "python"\nmax_batch_size: 4\n{echo_io}'
    models.write_python_model(repo, "echo", ECHO_PARAMETERS_MODEL, echo)
    return repo


def test_a_python_model_calls_other_models_and_gets_their_errors_and_codes(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("pipeline", [infer_input("X", x, "FP32")])
        np.testing.assert_allclose(result.as_numpy("Y"), x)  # (x + x) - x
        note = result.as_numpy("NOTE")[0, 0].decode()
        # The call's TritonError has the message and the code Triton gives it (2: NOT_FOUND).
        assert note.startswith("2 ") and "no_such_model" in note
        stats = triton.get_inference_statistics("simple", as_json=True)["model_stats"][0]
        assert int(stats["inference_count"]) == 4  # two calls of batch 2, counted as requests
        with pytest.raises(InferenceServerException, match="data-type is 'FP64'") as raised:
            triton.infer("wrong_input", [infer_input("X", x, "FP32")])
        # The called model's refusal, passed on as the model's own error, keeps its code.
        assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert triton.is_server_live()


def test_a_call_carries_its_own_request_parameters(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.ones((1, 16), np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("ask", [infer_input("X", x, "FP32")])
    assert json.loads(result.as_numpy("NOTE")[0, 0]) == {"asked_by": "ask", "depth": 1}


def test_a_call_names_its_sequence_with_a_correlation_id_and_flags(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.ones((1, 16), np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer("sequences", [infer_input("X", x, "FP32")])
    shown = json.loads(result.as_numpy("NOTE")[0, 0])
    assert shown["totals"] == {"11": [1, 3, 6], "twelve": [10, 30, 60]}
    assert "99" in shown["stray"]  # a sequence that never started: the scheduler's refusal


def test_a_calls_timeout_expires_it_in_the_queue(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.ones((1, 16), np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        # Answered when `slow` is free: preferred_memory and trace are taken as Triton's.
        note = triton.infer("timed", [infer_input("X", x, "FP32")]).as_numpy("NOTE")
        assert note[0, 0] == b""
        busy: list[object] = []
        triton.async_infer("slow", [infer_input("X", x, "FP32")], lambda *done: busy.append(done))
        time.sleep(0.3)  # `slow` holds its instance for 0.7 s more
        note = triton.infer("timed", [infer_input("X", x, "FP32")]).as_numpy("NOTE")
        assert b"it was not executed" in note[0, 0]


def test_async_calls_run_side_by_side(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    """Four `async_exec` calls gathered at once reach the called model's four instances
    together (calls that ran one after another would each wait alone)."""
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.zeros(1, np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        met = triton.infer("fan_out", [infer_input("X", x, "FP32")], client_timeout=120)
    assert met.as_numpy("Y")[0] == 4.0


def test_decoupled_calls_are_pulled_side_by_side(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    """Two threads of a model pull two decoupled calls at once: each called model sends its
    final response only once the caller received the other's first one, so streams pulled one
    after the other would each wait alone."""
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.zeros(1, np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        met = triton.infer("pull_both", [infer_input("X", x, "FP32")], client_timeout=120)
    assert met.as_numpy("Y")[0] == 2.0
