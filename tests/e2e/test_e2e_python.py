"""The Python backend end to end: Triton-style model.py files behind the dynamic batcher; a model
that raises or hangs fails only its own requests, and the server stays up."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from e2e_support import (
    ECHO_PARAMETERS_MODEL,
    StartServer,
    http_input,
    infer_input,
    model_workers,
    place_python_models,
)
from tritonclient.utils import InferenceServerException

from backends import driver_device_count
from scripts import models

SCALE = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = float(config["parameters"]["factor"]["string_value"])
        self.delay_s = float(config["parameters"]["delay_s"]["string_value"])

    def execute(self, requests):
        time.sleep(self.delay_s)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative values are not allowed")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            y = pb_utils.Tensor("Y", (x * self.factor).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
"""

RAISES = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        if x.ravel()[0] > 100:
            time.sleep(60)  # hangs far past the model's execute timeout
        raise RuntimeError("the model is broken on purpose")
"""


MAYBE_ADD = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            y = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B")
            if b is not None:
                y = y + b.as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
        return responses
"""

# Doubles X; a negative X asks `scale` (factor 3) for -3X first, so it answers -6X.
DOUBLE_OR_CALL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x.ravel()[0] < 0:
                called = pb_utils.InferenceRequest(
                    model_name="scale",
                    requested_output_names=["Y"],
                    inputs=[pb_utils.Tensor("X", -x)],
                ).exec()
                if called.has_error():
                    raise pb_utils.TritonModelException(called.error().message())
                x = pb_utils.get_output_tensor_by_name(called, "Y").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", 2 * x)]))
        return responses
"""

OPTIONAL_IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },'
    ' { name: "B" data_type: TYPE_FP32 dims: [ 4 ] optional: true } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)


def _config(name: str, factor: float = 1.0, delay_s: float = 0.0, extra: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 16\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f'parameters [ {{ key: "factor" value: {{ string_value: "{factor}" }} }},'
        f' {{ key: "delay_s" value: {{ string_value: "{delay_s}" }} }} ]\n'
        f"{extra}"
    )


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    batching = "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    models.write_python_model(repo, "scale", SCALE, _config("scale", 3.0, 0.05, batching))
    models.write_python_model(repo, "slow_a", SCALE, _config("slow_a", 2.0, 0.6))
    models.write_python_model(repo, "slow_b", SCALE, _config("slow_b", 5.0, 0.6))
    timeout = 'parameters { key: "convoy_execute_timeout_s" value: { string_value: "1" } }\n'
    models.write_python_model(
        repo,
        "broken",
        RAISES,
        'name: "broken"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' + timeout,
    )
    # Two Python steps with no dependency between them: they must run at the same time.
    (repo / "fan_out" / "1").mkdir(parents=True)
    (repo / "fan_out" / "config.pbtxt").write_text(
        'name: "fan_out"\nplatform: "ensemble"\nmax_batch_size: 16\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "TWICE" data_type: TYPE_FP32 dims: [ 4 ] },'
        ' { name: "FIVE" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "ensemble_scheduling { step [\n"
        '{ model_name: "slow_a" model_version: -1 input_map { key: "X" value: "X" } '
        'output_map { key: "Y" value: "TWICE" } },\n'
        '{ model_name: "slow_b" model_version: -1 input_map { key: "X" value: "X" } '
        'output_map { key: "Y" value: "FIVE" } } ] }\n',
        encoding="utf-8",
    )
    # The same slow model behind a bound of one execution in flight per step.
    models.write_python_model(
        repo,
        "slow_pair",
        SCALE,
        _config("slow_pair", 1.0, 0.3, "instance_group [ { count: 2 kind: KIND_CPU } ]\n"),
    )
    (repo / "bounded" / "1").mkdir(parents=True)
    (repo / "bounded" / "config.pbtxt").write_text(
        'name: "bounded"\nplatform: "ensemble"\nmax_batch_size: 16\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "ensemble_scheduling { max_inflight_requests: 1 step [\n"
        '{ model_name: "slow_pair" model_version: -1 input_map { key: "X" value: "X" } '
        'output_map { key: "Y" value: "Y" } } ] }\n',
        encoding="utf-8",
    )
    # An optional ensemble input that feeds an optional input of its step.
    models.write_python_model(
        repo,
        "maybe_add",
        MAYBE_ADD,
        'name: "maybe_add"\nbackend: "python"\nmax_batch_size: 4\n' + OPTIONAL_IO,
    )
    (repo / "optional" / "1").mkdir(parents=True)
    (repo / "optional" / "config.pbtxt").write_text(
        'name: "optional"\nplatform: "ensemble"\nmax_batch_size: 4\n'
        + OPTIONAL_IO
        + 'ensemble_scheduling { step [ { model_name: "maybe_add" model_version: -1 '
        'input_map { key: "X" value: "X" } input_map { key: "B" value: "B" } '
        'output_map { key: "Y" value: "Y" } } ] }\n',
        encoding="utf-8",
    )
    return repo


async def _infer_concurrently(url: str, model: str, count: int) -> list[np.ndarray]:
    async with aioclient.InferenceServerClient(url) as triton:

        async def one(i: int) -> np.ndarray:
            x = np.full((1, 4), float(i), np.float32)
            tensor = aioclient.InferInput("X", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            return (await triton.infer(model, [tensor])).as_numpy("Y")

        return await asyncio.gather(*(one(i) for i in range(count)))


async def _scale_concurrently(url: str, count: int) -> list[np.ndarray]:
    async with aioclient.InferenceServerClient(url) as triton:

        async def one(i: int) -> np.ndarray:
            x = np.full((1 + i % 3, 4), float(i), np.float32)
            tensor = aioclient.InferInput("X", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            return (await triton.infer("scale", [tensor])).as_numpy("Y")

        return await asyncio.gather(*(one(i) for i in range(count)))


def test_python_models_batch_fail_alone_and_survive_raises_and_hangs(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    with grpcclient.InferenceServerClient(server.url) as triton:
        # Batched through the dynamic batcher; each request still gets its own answer.
        answers = asyncio.run(_scale_concurrently(server.url, 24))
        for i, y in enumerate(answers):
            np.testing.assert_array_equal(y, np.full((1 + i % 3, 4), 3.0 * i, np.float32))
        stats = triton.get_inference_statistics("scale", as_json=True)["model_stats"][0]
        assert int(stats["execution_count"]) < 24
        config = triton.get_model_config("scale", as_json=True)["config"]
        assert config["backend"] == "python"

        # A per-request TritonError fails only that request, with the model's message.
        with pytest.raises(InferenceServerException, match="negative values are not allowed"):
            triton.infer("scale", [infer_input("X", -np.ones((1, 4), np.float32), "FP32")])

        # A model that raises: its requests fail with the exception, the server stays up.
        x = np.ones((1, 4), np.float32)
        with pytest.raises(InferenceServerException, match="the model is broken on purpose"):
            triton.infer("broken", [infer_input("X", x, "FP32")])

        if python_mode == "in-process":  # nothing can stop a hung execute in the server
            return
        # A model that hangs is bounded by its execute timeout; the worker is restarted.
        start_s = time.monotonic()
        with pytest.raises(InferenceServerException, match="did not return within 1") as error:
            triton.infer("broken", [infer_input("X", x * 500, "FP32")])
        assert time.monotonic() - start_s < 10
        assert "INTERNAL" in str(error.value.status())
        with pytest.raises(InferenceServerException, match="broken on purpose"):
            triton.infer("broken", [infer_input("X", x, "FP32")])  # the new worker answers
        assert triton.is_server_live()
        y = triton.infer("scale", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, 3 * x)


def test_ensemble_steps_whose_inputs_are_ready_run_at_the_same_time(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    with grpcclient.InferenceServerClient(server.url) as triton:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        start_s = time.monotonic()
        result = triton.infer("fan_out", [infer_input("X", x, "FP32")])
        elapsed_s = time.monotonic() - start_s
        np.testing.assert_array_equal(result.as_numpy("TWICE"), 2 * x)
        np.testing.assert_array_equal(result.as_numpy("FIVE"), 5 * x)
        assert elapsed_s < 1.1, f"two 0.6 s steps took {elapsed_s:.2f} s: they ran in turn"


def test_max_inflight_requests_bounds_the_executions_in_flight_at_a_step(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    start_s = time.monotonic()
    answers = asyncio.run(_infer_concurrently(server.url, "bounded", 3))
    elapsed_s = time.monotonic() - start_s
    assert [float(y.ravel()[0]) for y in answers] == [0.0, 1.0, 2.0]
    # Two instances could run two at once (0.6 s); the bound of one makes it three in turn.
    assert elapsed_s >= 0.9, f"3 requests of 0.3 s took {elapsed_s:.2f} s: not bounded"


def test_an_ensemble_runs_a_step_without_an_optional_input_the_request_left_out(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with grpcclient.InferenceServerClient(server.url) as triton:
        alone = triton.infer("optional", [infer_input("X", x, "FP32")]).as_numpy("Y")
        both = triton.infer(
            "optional", [infer_input("X", x, "FP32"), infer_input("B", x, "FP32")]
        ).as_numpy("Y")
    np.testing.assert_array_equal(alone, x)
    np.testing.assert_array_equal(both, 2 * x)


AUTO_COMPLETE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)
            ])
            for r in requests
        ]
"""


def test_auto_complete_config_supplies_what_the_config_leaves_out(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo = tmp_path / "repo"
    models.write_python_model(repo, "completed", AUTO_COMPLETE, 'backend: "python"\n')
    models.write_python_model(repo, "bare", SCALE, 'backend: "python"\n')
    server = start_server(place_python_models(repo, python_mode), "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as triton:
        config = triton.get_model_config("completed", as_json=True)["config"]
        assert [t["name"] for t in config["input"]] == ["X"]
        assert config["max_batch_size"] == 8 and "dynamic_batching" in config
        x = np.zeros((2, 4), np.float32)
        y = triton.infer("completed", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, x + 1)
        index = {m["name"]: m for m in triton.get_model_repository_index(as_json=True)["models"]}
        assert index["bare"]["state"] == "UNAVAILABLE"
        assert "declares its inputs and outputs" in index["bare"]["reason"]


@pytest.mark.skipif(driver_device_count() > 0, reason="a GPU is here: a KIND_GPU group loads")
def test_a_kind_gpu_python_model_without_a_gpu_fails_alone_with_the_reason(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo = tmp_path / "repo"
    gpu = "instance_group [ { kind: KIND_GPU } ]\n"
    models.write_python_model(repo, "on_gpu", SCALE, _config("on_gpu", extra=gpu))
    models.write_python_model(repo, "on_cpu", SCALE, _config("on_cpu", 2.0))
    server = start_server(place_python_models(repo, python_mode), "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as triton:
        index = {m["name"]: m for m in triton.get_model_repository_index(as_json=True)["models"]}
        assert index["on_gpu"]["state"] == "UNAVAILABLE"
        assert (
            "instance group 'on_gpu_0' has kind KIND_GPU, but the NVIDIA driver reports no "
            in (index["on_gpu"]["reason"])
        )
        x = np.ones((1, 4), np.float32)
        y = triton.infer("on_cpu", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, x * 2)


def test_request_parameters_reach_a_python_model_without_the_reserved_ones(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "echo",
        ECHO_PARAMETERS_MODEL,
        'name: "echo"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] },'
        ' { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]\n',
    )
    server = start_server(place_python_models(repo, python_mode))
    x = np.ones((1, 1), np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        result = triton.infer(
            "echo",
            [infer_input("X", x, "FP32")],
            parameters={"temperature": 0.5, "mode": "fast", "greedy": True, "top_k": 3},
            priority=1,
        )
        shown = json.loads(result.as_numpy("PARAMETERS")[0, 0])
        assert shown == {"temperature": 0.5, "mode": "fast", "greedy": True, "top_k": 3}
        plain = triton.infer("echo", [infer_input("X", x, "FP32")])
        assert json.loads(plain.as_numpy("PARAMETERS")[0, 0]) == {}
    body = json.dumps({"X": 2.0, "max_tokens": 16, "parameters": {"stop": "\n"}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/echo/generate", data=body
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        generated = json.loads(answer.read())
    assert json.loads(generated["PARAMETERS"]) == {"max_tokens": 16, "stop": "\n"}


# Answers the process it runs in, and whether its input arrived writable (Triton's are).
WHERE = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            x += 1  # in place
            facts = np.array([[os.getpid(), int(x.flags.writeable)]], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("FACTS", facts)]))
        return responses
"""


def test_a_python_model_runs_where_its_config_places_it(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "where",
        WHERE,
        'name: "where"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "FACTS" data_type: TYPE_INT64 dims: [ 2 ] } ]\n',
    )
    server = start_server(place_python_models(repo, python_mode))
    assert server.process is not None
    with grpcclient.InferenceServerClient(server.url) as triton:
        x = np.zeros((1, 4), np.float32)
        pid, writable = triton.infer("where", [infer_input("X", x, "FP32")]).as_numpy("FACTS")[0]
    assert (pid == server.process.pid) == (python_mode == "in-process")
    assert writable == 1


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> float:
    """Seconds until `condition` held; fails past `timeout_s`."""
    start_s = time.monotonic()
    while not condition():
        assert time.monotonic() - start_s < timeout_s, "the condition never held"
        time.sleep(0.02)
    return time.monotonic() - start_s


def test_a_dead_worker_makes_its_model_not_ready_until_it_is_replaced(
    tmp_path: Path, start_server: StartServer
) -> None:
    repo = tmp_path / "repo"
    models.write_python_model(repo, "slow", SCALE, _config("slow", 2.0, 0.6))
    models.write_model(repo, "simple", models.simple(), None)
    server = start_server(repo)
    assert server.process is not None
    x = np.ones((1, 4), np.float32)
    with grpcclient.InferenceServerClient(server.url) as triton:
        # Killed between batches: seen at once, not at the next request.
        (victim,) = model_workers(server.process.pid)
        os.kill(victim, signal.SIGKILL)
        _wait_for(lambda: not triton.is_model_ready("slow"), timeout_s=5.0)
        _wait_for(lambda: triton.is_model_ready("slow"))
        y = triton.infer("slow", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, 2 * x)
        # Killed while it runs a batch: that batch fails clearly, the next one is served.
        (victim,) = model_workers(server.process.pid)
        answers: queue.Queue[object] = queue.Queue()
        triton.async_infer(
            "slow", [infer_input("X", x, "FP32")], lambda result, error: answers.put(error)
        )
        time.sleep(0.3)  # inside its 0.6 s execute
        os.kill(victim, signal.SIGKILL)
        error = answers.get(timeout=30)
        assert isinstance(error, InferenceServerException)
        assert "exited with code -9 (SIGKILL) during execute" in str(error)
        _wait_for(lambda: triton.is_model_ready("slow"))
        y = triton.infer("slow", [infer_input("X", x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, 2 * x)
        # Nothing else noticed.
        assert triton.is_server_live() and triton.is_model_ready("simple")
        stats = triton.get_inference_statistics("slow").model_stats[0].inference_stats
        assert (stats.success.count, stats.fail.count) == (2, 1)


# Its weights come from pb_utils.shared_array; each load is logged, and each answer says which
# process answered, whether the weights are writable, and their sum.
SHARED_WEIGHTS = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        log = json.loads(args["model_config"])["parameters"]["log"]["string_value"]

        def load():
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\\n")
            return np.arange(1_000_000, dtype=np.float64)

        self.weights = pb_utils.shared_array("weights", load)

    def execute(self, requests):
        time.sleep(0.3)  # so that two requests at once take both instances
        facts = [os.getpid(), int(self.weights.flags.writeable), int(self.weights.sum())]
        out = pb_utils.Tensor("FACTS", np.array([facts], dtype=np.int64))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


def test_instances_share_one_copy_of_their_shared_arrays(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo, log = tmp_path / "repo", tmp_path / "loads.log"
    models.write_python_model(
        repo,
        "shared",
        SHARED_WEIGHTS,
        'name: "shared"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "FACTS" data_type: TYPE_INT64 dims: [ 1, 3 ] } ]\n'
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        f'parameters {{ key: "log" value: {{ string_value: "{log}" }} }}\n',
    )
    server = start_server(place_python_models(repo, python_mode))
    answers = asyncio.run(_facts_at_once(server.url, 2))
    assert len(log.read_text().split()) == 1  # loaded by one instance only
    expected = sum(range(1_000_000))
    assert [(writable, total) for _, writable, total in answers] == [(0, expected)] * 2
    if python_mode == "process":
        assert len({pid for pid, _, _ in answers}) == 2  # two workers, one copy
    assert server.process is not None
    mine = f"convoy-shared-{server.process.pid}-"
    assert [p for p in Path("/dev/shm").iterdir() if p.name.startswith(mine)]
    assert server.stop() == 0
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(mine)]


async def _facts_at_once(url: str, count: int) -> list[list[int]]:
    async with aioclient.InferenceServerClient(url) as triton:

        async def one() -> list[int]:
            tensor = aioclient.InferInput("X", [4], "FP32")
            tensor.set_data_from_numpy(np.zeros(4, np.float32))
            facts: list[int] = (await triton.infer("shared", [tensor])).as_numpy("FACTS")[0]
            return [int(value) for value in facts]

        return await asyncio.gather(*(one() for _ in range(count)))


def test_an_inline_execute_serves_both_protocols_and_leaves_the_loop_when_it_calls(
    tmp_path: Path, start_server: StartServer
) -> None:
    """convoy_inline_execute: a fast in-process model's batches move onto the event loop once
    measured; one that then calls another model fails that batch with the reason, and its
    batches run on its thread from then on, where the call works."""
    repo = tmp_path / "repo"
    config = _config("doubles").split("parameters [")[0] + (
        'parameters [ { key: "convoy_in_process" value: { string_value: "true" } },'
        ' { key: "convoy_inline_execute" value: { string_value: "true" } } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
    )
    models.write_python_model(repo, "doubles", DOUBLE_OR_CALL, config)
    models.write_python_model(repo, "scale", SCALE, _config("scale", 3.0))
    server = start_server(repo)
    x = np.arange(4, dtype=np.float32).reshape(1, 4) + 1
    answers = asyncio.run(_infer_concurrently(server.url, "doubles", 24))
    for i, y in enumerate(answers):
        np.testing.assert_array_equal(y, np.full((1, 4), 2.0 * i, np.float32))
    with (
        grpcclient.InferenceServerClient(server.url) as triton,
        httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http,
    ):
        for _ in range(20):  # one at a time: batches of one, measured, then inline
            y = http.infer("doubles", [http_input("X", x, "FP32")]).as_numpy("Y")
            np.testing.assert_array_equal(y, 2 * x)
        with pytest.raises(InferenceServerException, match="convoy_inline_execute") as error:
            triton.infer("doubles", [infer_input("X", -x, "FP32")])
        assert "cannot call another model" in str(error.value)
        y = triton.infer("doubles", [infer_input("X", -x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, 6 * x)
        y = http.infer("doubles", [http_input("X", -x, "FP32")]).as_numpy("Y")
        np.testing.assert_array_equal(y, 6 * x)
        stats = triton.get_inference_statistics("doubles", as_json=True)["model_stats"][0]
        assert int(stats["inference_stats"]["success"]["count"]) == 24 + 20 + 2
        assert int(stats["inference_stats"]["fail"]["count"]) == 1
    assert "its batches run on the instance's thread from now on" in server.log()
