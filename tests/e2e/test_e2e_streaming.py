"""ModelStreamInfer: many requests in flight on one stream, answered by id, errors in-band."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, infer_input, simple_inputs
from tritonclient.utils import InferenceServerException

REQUESTS = 200
BAD = 57  # this one names an input the model does not have


@contextlib.contextmanager
def _client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as opened:
        yield opened


def test_200_requests_on_one_stream_each_answered_one_bad(convoy: ConvoyServer) -> None:
    answers: dict[str, object] = {}
    errors: list[InferenceServerException] = []
    all_in = threading.Event()
    lock = threading.Lock()

    def callback(result: grpcclient.InferResult | None, error: object) -> None:
        with lock:
            if error is not None:
                errors.append(error)  # type: ignore[arg-type]
            else:
                assert result is not None
                answers[result.get_response().id] = result
            if len(answers) + len(errors) == REQUESTS:
                all_in.set()

    expected: dict[str, np.ndarray] = {}
    with _client(convoy.url) as client:
        client.start_stream(callback)
        for i in range(REQUESTS):
            inputs, a, b = simple_inputs(1, seed=i)
            if i == BAD:
                inputs = [infer_input("NOPE", a, "FP32"), inputs[1]]
            expected[f"r{i}"] = a + b
            client.async_stream_infer("simple", inputs, request_id=f"r{i}")
        assert all_in.wait(30), f"{len(answers)} answers and {len(errors)} errors arrived"
        client.stop_stream()
    assert len(answers) == REQUESTS - 1
    for request_id, result in answers.items():
        np.testing.assert_allclose(
            result.as_numpy("OUTPUT0"),  # type: ignore[attr-defined]
            expected[request_id],
            rtol=1e-6,
        )
    (error,) = errors
    assert "unexpected inference input 'NOPE'" in str(error)
