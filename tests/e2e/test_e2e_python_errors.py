"""A Python model's error codes end to end: the code of the `TritonError` a model answers with is
the status its client sees, over gRPC and HTTP, as Triton's front ends map each code; the
model in its own process and in the server's, with batching, and through a front-end worker."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import PYTHON_MODES, ConvoyServer, http_input, infer_input, place_python_models
from tritonclient.utils import InferenceServerException

from scripts import models

# Answers each request with the error its CODE names (a TritonError constant, or a number),
# or with Y = 1 for "OK".
CODED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy().ravel()[0]
            name = name.decode()
            if name == "OK":
                y = pb_utils.Tensor("Y", np.ones([1, 1], dtype=np.float32))
                responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
                continue
            code = int(name) if name.isdigit() else getattr(pb_utils.TritonError, name)
            error = pb_utils.TritonError(f"error code: {name}", code)
            responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses
"""

CONFIG = """
name: "coded"
backend: "python"
max_batch_size: 8
input [ { name: "CODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

# Triton's code -> (gRPC status, HTTP status), as Triton's front ends answer each.
EXPECTED = {
    "UNKNOWN": ("StatusCode.UNKNOWN", "400"),
    "INTERNAL": ("StatusCode.INTERNAL", "500"),
    "NOT_FOUND": ("StatusCode.NOT_FOUND", "404"),
    "INVALID_ARG": ("StatusCode.INVALID_ARGUMENT", "400"),
    "UNAVAILABLE": ("StatusCode.UNAVAILABLE", "503"),
    "UNSUPPORTED": ("StatusCode.UNIMPLEMENTED", "501"),
    "ALREADY_EXISTS": ("StatusCode.ALREADY_EXISTS", "400"),
    "CANCELLED": ("StatusCode.CANCELLED", "400"),
    "99": ("StatusCode.INTERNAL", "500"),  # no such code: TritonError's default
}


# Where the model runs, and the server's front-end flags: in process, or through a worker (the
# status then crosses the link between the two).
PLACES = [(mode, ()) for mode in PYTHON_MODES] + [("process", ("--frontend-workers", "1"))]


@pytest.fixture(scope="module", params=PLACES, ids=["process", "in-process", "front-end-worker"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    mode, flags = request.param
    where = tmp_path_factory.mktemp("coded")
    repo = where / "repo"
    models.write_python_model(repo, "coded", CODED, CONFIG)
    served = ConvoyServer(place_python_models(repo, mode), where / "server.log", *flags).start()
    yield served
    served.kill()


def _grpc_input(name: str) -> grpcclient.InferInput:
    return infer_input("CODE", np.array([[name.encode()]], dtype=object), "BYTES")


def _http_input(name: str) -> httpclient.InferInput:
    return http_input("CODE", np.array([[name.encode()]], dtype=object), "BYTES")


@pytest.mark.parametrize("code", list(EXPECTED))
def test_a_models_error_code_is_the_status_its_client_sees(server: ConvoyServer, code: str) -> None:
    grpc_status, http_status = EXPECTED[code]
    with grpcclient.InferenceServerClient(server.url) as client:
        with pytest.raises(InferenceServerException) as raised:
            client.infer("coded", [_grpc_input(code)])
        assert raised.value.status() == grpc_status
        assert f"error code: {code}" in raised.value.message()
        # The model's error fails its own request alone.
        assert client.infer("coded", [_grpc_input("OK")]).as_numpy("Y").tolist() == [[1.0]]
    with httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        with pytest.raises(InferenceServerException) as raised:
            client.infer("coded", [_http_input(code)])
        assert raised.value.status() == http_status
        assert f"error code: {code}" in raised.value.message()


def test_errors_of_one_batch_keep_each_requests_own_code(server: ConvoyServer) -> None:
    """Requests batched together: each answers with its own code, or its outputs."""
    codes = ["INVALID_ARG", "OK", "NOT_FOUND", "OK", "UNAVAILABLE", "INTERNAL"]
    answers: queue.Queue[tuple[int, object]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.url) as client:
        for index, code in enumerate(codes):
            client.async_infer(
                "coded",
                [_grpc_input(code)],
                lambda result, error, index=index: answers.put((index, result or error)),
            )
        results = dict(answers.get(timeout=30) for _ in codes)
    for index, code in enumerate(codes):
        answer = results[index]
        if code == "OK":
            assert not isinstance(answer, InferenceServerException), answer
        else:
            assert isinstance(answer, InferenceServerException)
            assert answer.status() == EXPECTED[code][0]
