"""Iterative sequences (`sequence_batching { iterative_sequence: true }`): a Python model runs a
request one step per execution, rescheduling it in between
(`TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`), and new requests join the running ones' batches:
continuous batching, over gRPC and HTTP, decoupled or not, in both Python modes."""

from __future__ import annotations

import asyncio
import queue
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from e2e_support import StartServer, generate_stream, infer_input, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import models

STEPS = '''\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Counts each request up to its COUNT, one step per execution: the request is rescheduled
    until its last step. A decoupled model sends every step (STEP, and BATCH: how many requests
    the execution held) and the final flag with the last; the other answers the last step."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.steps = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = request.correlation_id()
            count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy().item()
            first = request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            step = self.steps[corrid] = 1 if first else self.steps.get(corrid, 0) + 1
            answer = pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("STEP", np.array([[step]], np.int32)),
                    pb_utils.Tensor("BATCH", np.array([[len(requests)]], np.int32)),
                ]
            )
            last = step >= count
            if last:
                del self.steps[corrid]
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if self.decoupled:
                final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
                request.get_response_sender().send(answer, flags=final)
            else:
                responses.append(answer if last else None)
        return None if self.decoupled else responses
'''


def _config(name: str, decoupled: bool, iterative: bool = True, candidates: int = 8) -> str:
    sequence = (
        f"sequence_batching {{ iterative_sequence: true oldest {{ max_candidate_sequences: "
        f"{candidates} }} }}\n"
        if iterative
        else "dynamic_batching { }\n"
    )
    policy = "model_transaction_policy { decoupled: true }\n" if decoupled else ""
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n{policy}{sequence}'
        'input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "STEP" data_type: TYPE_INT32 dims: [ 1 ] },'
        ' { name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )


def _repository(tmp_path: Path, python_mode: str) -> Path:
    repo = tmp_path / "repo"
    for name, decoupled, iterative, candidates in (
        ("steps", False, True, 8),
        ("steps_stream", True, True, 8),
        ("steps_one_slot", True, True, 1),
        ("steps_not_iterative", False, False, 8),
    ):
        config = _config(name, decoupled, iterative, candidates)
        models.write_python_model(repo, name, STEPS, config)
    return place_python_models(repo, python_mode)


def _count(value: int) -> list[grpcclient.InferInput]:
    return [infer_input("COUNT", np.array([[value]], np.int32), "INT32")]


def test_an_iterative_model_answers_each_request_after_its_last_step(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(_repository(tmp_path, python_mode))
    counts = [1, 5, 2, 8, 3, 6, 4, 7]

    async def together() -> list[int]:
        async with aioclient.InferenceServerClient(server.url) as aio:
            answers = await asyncio.gather(*(aio.infer("steps", _count(n)) for n in counts))
            return [int(answer.as_numpy("STEP").item()) for answer in answers]

    assert asyncio.run(together()) == counts
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as http:
        count = httpclient.InferInput("COUNT", [1, 1], "INT32")
        count.set_data_from_numpy(np.array([[3]], np.int32))
        assert int(http.infer("steps", [count]).as_numpy("STEP").item()) == 3
    with grpcclient.InferenceServerClient(server.url) as triton:
        # Named: the model sees the client's correlation id, and its steps are counted apart.
        answer = triton.infer("steps", _count(4), sequence_id=4242)
        assert int(answer.as_numpy("STEP").item()) == 4
        stats = triton.get_inference_statistics("steps").model_stats[0]
        # Every request answered once; the steps of requests in flight shared executions.
        assert stats.inference_stats.success.count == len(counts) + 2
        assert stats.execution_count < sum(counts) + 3 + 4
        # A model without iterative_sequence answers a request it does not reschedule, and
        # cannot reschedule one: that request fails and says why.
        answer = triton.infer("steps_not_iterative", _count(1))
        assert int(answer.as_numpy("STEP").item()) == 1
        with pytest.raises(InferenceServerException, match="iterative_sequence: true"):
            triton.infer("steps_not_iterative", _count(2))


def test_an_iterative_decoupled_model_streams_every_step_and_batches_newcomers_with_them(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(_repository(tmp_path, python_mode))
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    counts = {"a": 6, "b": 3, "c": 5, "d": 2}
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: results.put((result, error)))
        for request_id, count in counts.items():
            triton.async_stream_infer("steps_stream", _count(count), request_id=request_id)
        steps: dict[str, list[int]] = {request_id: [] for request_id in counts}
        batches: list[int] = []
        finals: set[str] = set()
        for _ in range(sum(counts.values())):
            result, error = results.get(timeout=20)
            assert error is None and result is not None, error
            response = result.get_response()
            steps[response.id].append(int(result.as_numpy("STEP").item()))
            batches.append(int(result.as_numpy("BATCH").item()))
            if response.parameters["triton_final_response"].bool_param:
                finals.add(response.id)
        triton.stop_stream()
    assert steps == {request_id: list(range(1, n + 1)) for request_id, n in counts.items()}
    assert finals == set(counts)
    assert max(batches) > 1  # requests at different steps ran in one execution

    # HTTP's generate_stream: one event per step.
    events = generate_stream(server.http_port, "steps_stream", {"COUNT": 4})
    assert [event["STEP"] for event in events] == [1, 2, 3, 4]


def test_a_client_that_leaves_frees_its_iterative_requests_slot(
    tmp_path: Path, start_server: StartServer, python_mode: str
) -> None:
    server = start_server(_repository(tmp_path, python_mode))
    results: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: results.put((result, error)))
        triton.async_stream_infer("steps_one_slot", _count(10**6), request_id="endless")
        for _ in range(3):  # it runs, step after step, in the model's only slot
            result, error = results.get(timeout=20)
            assert error is None and result is not None
        triton.stop_stream(cancel_requests=True)
    answers: queue.Queue[tuple[grpcclient.InferResult | None, Exception | None]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as triton:
        triton.start_stream(callback=lambda result, error: answers.put((result, error)))
        triton.async_stream_infer("steps_one_slot", _count(2), request_id="next")
        steps = []
        for _ in range(2):
            result, error = answers.get(timeout=20)  # the slot is free again
            assert error is None and result is not None, error
            steps.append(int(result.as_numpy("STEP").item()))
        triton.stop_stream()
    assert steps == [1, 2]
