"""Decoupled Python models over ModelStreamInfer: 0..N responses per request, matched by id,
`triton_final_response` as Triton marks it; unary inference on them is refused."""

from __future__ import annotations

import json
import queue
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, generate_stream, infer_input, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import models


def _repository(tmp_path: Path) -> Path:
    """`repeat`, and `repeat_reshaped`: the same model whose input has a reshape, so that the
    tensors the batcher queues are not the ones the request arrived with."""
    repo = tmp_path / "repo"
    for name, reshape in (("repeat", ""), ("repeat_reshaped", " reshape { shape: [ 1, 1 ] }")):
        models.write_repeat_model(
            repo, name, "dynamic_batching { max_queue_delay_microseconds: 10000 }\n", reshape
        )
    return repo


def _count(value: int) -> list[grpcclient.InferInput]:
    return [infer_input("COUNT", np.array([[value]], np.int32), "INT32")]


@pytest.mark.parametrize("model", ["repeat", "repeat_reshaped"])
def test_a_decoupled_model_streams_each_requests_responses_then_its_final_flag(
    tmp_path: Path, start_server: StartServer, python_mode: str, model: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: results.put((result, error)))
        counts = {f"r{i}": i % 4 for i in range(12)}
        for request_id, count in counts.items():
            triton.async_stream_infer(
                model, _count(count), request_id=request_id, enable_empty_final_response=True
            )
        triton.async_stream_infer(model, _count(-1), request_id="bad")
        seen: dict[str, list[int]] = {request_id: [] for request_id in counts}
        finals: set[str] = set()
        errors: list[str] = []
        # Each request: `count` responses and an empty final one; the bad one: one error.
        for _ in range(sum(counts.values()) + len(counts) + 1):
            result, error = results.get(timeout=20)
            if error is not None:
                errors.append(str(error))
                continue
            assert result is not None
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if final:
                assert result.as_numpy("INDEX") is None  # the empty final response
                finals.add(response.id)
            else:
                seen[response.id].append(int(result.as_numpy("INDEX").ravel()[0]))
        triton.stop_stream()
        assert finals == set(counts)
        assert {rid: indices for rid, indices in seen.items()} == {
            rid: list(range(count)) for rid, count in counts.items()
        }
        assert len(errors) == 1 and "COUNT must be >= 0" in errors[0]

        # Unary inference cannot carry 0..N responses: refused as Triton does.
        with pytest.raises(InferenceServerException, match="decoupled") as refused:
            triton.infer(model, _count(1))
        assert "UNIMPLEMENTED" in str(refused.value.status())


def test_generate_stream_sends_every_response_of_a_decoupled_model(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(place_python_models(_repository(tmp_path), python_mode))
    events = generate_stream(server.http_port, "repeat", {"COUNT": 3})
    assert [e["INDEX"] for e in events] == [0, 1, 2]
    assert {e["model_name"] for e in events} == {"repeat"}


STREAMED_TOTALS = '''\
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A running total per sequence (its START and END read from the request's flags()), sent
    from a thread after execute returns: the total, ten times it, then the final flag."""

    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        for request in requests:
            def read(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            corrid, flags = request.correlation_id(), request.flags()
            start = flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            total = int(read("INPUT")[0]) + (0 if start else self.totals[corrid])
            self.totals[corrid] = total
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.totals[corrid]
            threading.Thread(target=self.send, args=(request.get_response_sender(), total)).start()
        return None

    def send(self, sender, total):
        for value in (total, total * 10):
            output = pb_utils.Tensor("OUTPUT", np.array([value], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[output]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''


def test_a_decoupled_stateful_model_streams_each_sequences_responses_in_order(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    """Two sequences interleaved on one stream through the sequence batcher: each request's
    responses come after the one before it in its sequence has sent its final flag."""
    repo = tmp_path / "repo"
    models.write_python_model(
        repo,
        "totals",
        STREAMED_TOTALS,
        'name: "totals"\nbackend: "python"\nmax_batch_size: 0\n'
        "model_transaction_policy { decoupled: true }\n"
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        "sequence_batching { }\n",
    )
    server = start_server(place_python_models(repo, python_mode))
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    sent = {21: [1, 2, 3], 22: [100, 200, 300]}
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: results.put((result, error)))
        for step in range(3):
            for sequence, values in sent.items():
                triton.async_stream_infer(
                    "totals",
                    [infer_input("INPUT", np.array([values[step]], np.int32), "INT32")],
                    request_id=f"{sequence}-{step}",
                    sequence_id=sequence,
                    sequence_start=step == 0,
                    sequence_end=step == 2,
                )
        # A sequence the server never saw start: Triton's error, in band.
        triton.async_stream_infer(
            "totals",
            [infer_input("INPUT", np.array([1], np.int32), "INT32")],
            request_id="stray",
            sequence_id=23,
        )
        seen: dict[str, list[int]] = {}
        errors = []
        for _ in range(2 * 6 + 1):
            result, error = results.get(timeout=20)
            if error is not None:
                errors.append(str(error))
                continue
            assert result is not None
            seen.setdefault(result.get_response().id, []).append(int(result.as_numpy("OUTPUT")[0]))
        triton.stop_stream()
    for sequence, values in sent.items():
        totals = np.cumsum(values)
        for step in range(3):
            assert seen[f"{sequence}-{step}"] == [totals[step], totals[step] * 10]
    assert len(errors) == 1 and "must specify the START flag" in errors[0], errors


def test_a_decoupled_models_instance_count_changes_in_place(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    repo = place_python_models(_repository(tmp_path), python_mode)
    server = start_server(repo, "--model-control-mode", "explicit", "--load-model", "repeat")
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as triton:
        config = triton.get_model_config("repeat", as_json=True)["config"]
        for count in (2, 1):  # one instance added, then one retired
            config["instance_group"][0]["count"] = count
            triton.load_model("repeat", config=json.dumps(config))
            served = triton.get_model_config("repeat").config
            assert [group.count for group in served.instance_group] == [count]
            triton.start_stream(callback=lambda result, error: results.put((result, error)))
            triton.async_stream_infer("repeat", _count(2))
            for index in range(2):
                result, error = results.get(timeout=20)
                assert error is None and result is not None, error
                assert int(result.as_numpy("INDEX").ravel()[0]) == index
            triton.stop_stream()


def test_an_ensemble_step_on_a_decoupled_model_takes_its_one_response(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    """Asked through ModelInfer, an ensemble whose step is a decoupled model answers once: one
    response of the step serves, another count fails the request, saying so."""
    repo = _repository(tmp_path)
    (repo / "ensemble" / "1").mkdir(parents=True)
    (repo / "ensemble" / "config.pbtxt").write_text(
        'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "I" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "repeat" model_version: -1 '
        'input_map { key: "COUNT" value: "N" } output_map { key: "INDEX" value: "I" } } ] }\n'
    )
    server = start_server(place_python_models(repo, python_mode))
    with grpcclient.InferenceServerClient(server.url) as triton:
        one = [infer_input("N", np.array([[1]], np.int32), "INT32")]
        assert triton.infer("ensemble", one).as_numpy("I").tolist() == [[0]]
        three = [infer_input("N", np.array([[3]], np.int32), "INT32")]
        with pytest.raises(InferenceServerException, match="sent 3 responses") as refused:
            triton.infer("ensemble", three)
        assert "UNIMPLEMENTED" in str(refused.value.status())


ADD = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.add = int(config["parameters"]["add"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + self.add)]))
        return responses
"""


def _add_model(repo: Path, name: str, add: int) -> None:
    models.write_python_model(
        repo,
        name,
        ADD,
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f'parameters {{ key: "add" value: {{ string_value: "{add}" }} }}\n',
    )


def _pipeline(repo: Path, max_inflight: int, name: str = "pipeline", extra: str = "") -> None:
    """`pipeline`: `pre` (+0, once per request) -> `repeat` (decoupled: COUNT responses) ->
    `post` (+100, once per response); its outputs are repeat's INDEX and post's."""
    if not (repo / "pre").exists():
        _add_model(repo, "pre", 0)
        _add_model(repo, "post", 100)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n{extra}'
        'input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "I" data_type: TYPE_INT32 dims: [ 1 ] }, '
        '{ name: "J" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        f"ensemble_scheduling {{ max_inflight_requests: {max_inflight} step [ "
        '{ model_name: "pre" model_version: -1 '
        'input_map { key: "X" value: "N" } output_map { key: "Y" value: "n" } }, '
        '{ model_name: "repeat" model_version: -1 '
        'input_map { key: "COUNT" value: "n" } output_map { key: "INDEX" value: "I" } }, '
        '{ model_name: "post" model_version: -1 '
        'input_map { key: "X" value: "I" } output_map { key: "Y" value: "J" } } ] }\n'
    )


@pytest.mark.parametrize("max_inflight", [0, 1])
def test_an_ensemble_streams_each_response_of_its_decoupled_step_through_the_rest(
    tmp_path: Path, start_server: StartServer, python_mode: str, max_inflight: int
) -> None:
    """Triton's fan-out: each response of the decoupled step runs the steps after it and
    reaches the client as one response of the ensemble; the step before it runs once."""
    repo = _repository(tmp_path)
    _pipeline(repo, max_inflight)
    declared = "model_transaction_policy { decoupled: true }\n"
    _pipeline(repo, max_inflight, "declared", declared)
    server = start_server(place_python_models(repo, python_mode))
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    counts = {"a": 3, "b": 0, "c": 2}
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: results.put((result, error)))
        for request_id, count in counts.items():
            n = [infer_input("N", np.array([[count]], np.int32), "INT32")]
            triton.async_stream_infer(
                "pipeline", n, request_id=request_id, enable_empty_final_response=True
            )
        seen: dict[str, list[tuple[int, int]]] = {request_id: [] for request_id in counts}
        finals = set()
        for _ in range(sum(counts.values()) + len(counts)):
            result, error = results.get(timeout=20)
            assert error is None and result is not None, error
            response = result.get_response()
            if response.parameters["triton_final_response"].bool_param:
                finals.add(response.id)
                continue
            i, j = result.as_numpy("I"), result.as_numpy("J")
            seen[response.id].append((int(i.ravel()[0]), int(j.ravel()[0])))
        # A step that fails ends its request with the step's error; a declared decoupled
        # ensemble streams the same way.
        bad = [infer_input("N", np.array([[-1]], np.int32), "INT32")]
        triton.async_stream_infer("pipeline", bad, request_id="bad")
        _, error = results.get(timeout=20)
        assert error is not None and "COUNT must be >= 0" in str(error)
        two = [infer_input("N", np.array([[2]], np.int32), "INT32")]
        triton.async_stream_infer("declared", two, request_id="declared")
        declared_j = sorted(int(results.get(timeout=20)[0].as_numpy("J")[0][0]) for _ in "ab")
        triton.stop_stream()
        assert declared_j == [100, 101]
        assert finals == set(counts)
        assert {rid: sorted(pairs) for rid, pairs in seen.items()} == {
            rid: [(index, index + 100) for index in range(count)] for rid, count in counts.items()
        }
        with pytest.raises(InferenceServerException, match="decoupled transaction policy"):
            triton.infer("declared", two)  # declared decoupled: ModelInfer refuses, as Triton
        every = triton.get_inference_statistics(as_json=True)["model_stats"]
        stats = {s["name"]: int(s.get("inference_count", 0)) for s in every}
        assert stats["pipeline"] == len(counts)  # each streamed request, once it ended
        (pipeline,) = [s["inference_stats"] for s in every if s["name"] == "pipeline"]
        assert int(pipeline["success"]["count"]) == len(counts)
        # Its steps' time, as the compute of each streamed request's success.
        assert int(pipeline["compute_infer"]["ns"]) > 0
        assert stats["pre"] == len(counts) + 2  # once per request
        assert stats["post"] == sum(counts.values()) + 2  # once per response

        # Answered once: one response passes, more are refused with the count.
        one = [infer_input("N", np.array([[1]], np.int32), "INT32")]
        answer = triton.infer("pipeline", one)
        assert answer.as_numpy("I").tolist() == [[0]] and answer.as_numpy("J").tolist() == [[100]]
        three = [infer_input("N", np.array([[3]], np.int32), "INT32")]
        with pytest.raises(InferenceServerException, match="sent 3 responses") as refused:
            triton.infer("pipeline", three)
        assert "UNIMPLEMENTED" in str(refused.value.status())

    events = generate_stream(server.http_port, "pipeline", {"N": 2})
    assert sorted((e["I"], e["J"]) for e in events) == [(0, 100), (1, 101)]
