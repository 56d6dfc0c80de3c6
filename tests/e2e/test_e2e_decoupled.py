"""Decoupled Python models over ModelStreamInfer: 0..N responses per request, matched by id,
`triton_final_response` as Triton marks it; unary inference on them is refused."""

from __future__ import annotations

import json
import queue
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, infer_input, place_python_models
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
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/repeat/generate_stream",
        data=json.dumps({"COUNT": 3}).encode(),
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        events = [
            json.loads(line[len(b"data: ") :])
            for line in answer.read().splitlines()
            if line.startswith(b"data: ")
        ]
    assert [e["INDEX"] for e in events] == [0, 1, 2]
    assert {e["model_name"] for e in events} == {"repeat"}
