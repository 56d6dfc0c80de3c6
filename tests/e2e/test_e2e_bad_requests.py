"""Every way a ModelInfer request can be wrong, each refused with Triton's status code and a message
that names the problem; afterwards, and interleaved with them, good requests still succeed."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from e2e_support import ConvoyServer, infer_input, raw_tensor, sample_array, simple_inputs
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

Inputs = Callable[[], list[grpcclient.InferInput]]


def _good() -> list[grpcclient.InferInput]:
    return simple_inputs(1)[0]


def _fp32(name: str, shape: tuple[int, ...]) -> grpcclient.InferInput:
    return infer_input(name, np.ones(shape, dtype=np.float32), "FP32")


def _pair(shape: tuple[int, ...]) -> Inputs:
    return lambda: [_fp32("INPUT0", shape), _fp32("INPUT1", shape)]


def _int32_input1() -> list[grpcclient.InferInput]:
    return [_good()[0], infer_input("INPUT1", np.ones((1, 16), np.int32), "INT32")]


def _case(
    name: str,
    model: str,
    inputs: Inputs,
    code: str,
    text: str,
    *,
    version: str = "",
    outputs: tuple[str, ...] = (),
) -> object:
    return pytest.param(model, version, inputs, outputs, code, text, id=name)


def _identity_fp32() -> list[grpcclient.InferInput]:
    return [_fp32("INPUT0", (1, 4))]


# Cases tritonclient's own API can express; the status code is Triton's for each.
CLIENT_CASES = [
    _case("unknown-model", "no_such_model", _good, "NOT_FOUND",
          "Request for unknown model: 'no_such_model' is not found"),
    _case("unknown-version", "simple", _good, "NOT_FOUND", "'simple' version 7 is not found",
          version="7"),
    _case("non-numeric-version", "simple", _good, "INVALID_ARGUMENT", "'one'", version="one"),
    _case("negative-version", "simple", _good, "INVALID_ARGUMENT", "'-1'", version="-1"),
    _case("broken-model", "broken_garbage", _identity_fp32, "UNAVAILABLE", "model.onnx"),
    _case("broken-config", "broken_typo", _identity_fp32, "UNAVAILABLE", "config.pbtxt: line 3"),
    _case("broken-version", "broken_garbage", _identity_fp32, "UNAVAILABLE",
          "'broken_garbage' version 1 is not at ready state", version="1"),
    _case("unknown-input", "simple", lambda: [*_good(), _fp32("INPUT9", (1, 16))],
          "INVALID_ARGUMENT", "unexpected inference input 'INPUT9' for model 'simple'"),
    _case("missing-input", "simple", lambda: _good()[:1], "INVALID_ARGUMENT",
          "expected 2 inputs but got 1 inputs for model 'simple'"),
    _case("duplicate-input", "simple", lambda: [_good()[0], _good()[0]], "INVALID_ARGUMENT",
          "'INPUT0'"),
    _case("wrong-datatype", "simple", _int32_input1, "INVALID_ARGUMENT",
          "inference input 'INPUT1' data-type is 'INT32', but model 'simple' expects 'FP32'"),
    _case("shape-not-matching-dims", "simple", _pair((1, 15)), "INVALID_ARGUMENT",
          "unexpected shape for input 'INPUT0' for model 'simple'"),
    _case("no-batch-dim", "simple", _pair((16,)), "INVALID_ARGUMENT", "'INPUT0'"),
    _case("batch-over-max", "simple", _pair((9, 16)), "INVALID_ARGUMENT",
          "batch-size must be <= 8"),
    _case("batch-zero", "simple", _pair((0, 16)), "INVALID_ARGUMENT", "batch-size must be >= 1"),
    _case("batch-sizes-differ", "simple", lambda: [_fp32("INPUT0", (2, 16)),
          _fp32("INPUT1", (3, 16))], "INVALID_ARGUMENT", "batch size"),
    _case("non-batching-shape", "nobatch_fp32", lambda: [_fp32("INPUT0", (3, 4))],
          "INVALID_ARGUMENT", "unexpected shape for input 'INPUT0' for model 'nobatch_fp32'"),
    _case("unknown-output", "simple", _good, "INVALID_ARGUMENT",
          "unexpected inference output 'OUTPUT9' for model 'simple'", outputs=("OUTPUT9",)),
]  # fmt: skip


@pytest.mark.parametrize(("model", "version", "inputs", "outputs", "code", "text"), CLIENT_CASES)
def test_rejected(
    client: grpcclient.InferenceServerClient,
    model: str,
    version: str,
    inputs: Inputs,
    outputs: tuple[str, ...],
    code: str,
    text: str,
) -> None:
    requested = [grpcclient.InferRequestedOutput(n) for n in outputs] or None
    with pytest.raises(InferenceServerException) as error:
        client.infer(model, inputs(), model_version=version, outputs=requested)
    assert error.value.status() == f"StatusCode.{code}"
    assert text in error.value.message()


def _request(model: str = "simple") -> service_pb2.ModelInferRequest:
    return service_pb2.ModelInferRequest(model_name=model)


def _raw_simple(first: bytes, second: bytes) -> service_pb2.ModelInferRequest:
    request = _request()
    for name in ("INPUT0", "INPUT1"):
        raw_tensor(request, name, "FP32", [1, 16])
    request.raw_input_contents.extend([first, second])
    return request


FP32_ROW = np.ones(16, dtype=np.float32).tobytes()


def _bytes_request(raw: bytes, shape: list[int]) -> service_pb2.ModelInferRequest:
    request = _request("identity_bytes")
    raw_tensor(request, "INPUT0", "BYTES", shape)
    request.raw_input_contents.append(raw)
    return request


def _length(n: int) -> bytes:
    return struct.pack("<I", n)


def _extra_raw() -> service_pb2.ModelInferRequest:
    request = _raw_simple(FP32_ROW, FP32_ROW)
    request.raw_input_contents.append(FP32_ROW)
    return request


def _fewer_raw() -> service_pb2.ModelInferRequest:
    request = _raw_simple(FP32_ROW, FP32_ROW)
    del request.raw_input_contents[1]
    return request


def _mixed() -> service_pb2.ModelInferRequest:
    request = _raw_simple(FP32_ROW, FP32_ROW)
    request.inputs[1].contents.fp32_contents.extend([1.0] * 16)
    return request


def _mixed_one_raw() -> service_pb2.ModelInferRequest:
    request = _mixed()
    del request.raw_input_contents[1]
    return request


def _unknown_datatype() -> service_pb2.ModelInferRequest:
    request = _raw_simple(FP32_ROW, FP32_ROW)
    request.inputs[0].datatype = "FP8"
    return request


def _no_data() -> service_pb2.ModelInferRequest:
    request = _request()
    for name in ("INPUT0", "INPUT1"):
        raw_tensor(request, name, "FP32", [1, 16])
    return request


def _negative_dim() -> service_pb2.ModelInferRequest:
    request = _raw_simple(FP32_ROW, FP32_ROW)
    request.inputs[0].shape[1] = -16
    return request


def _typed_count_mismatch() -> service_pb2.ModelInferRequest:
    request = _request()
    for name in ("INPUT0", "INPUT1"):
        raw_tensor(request, name, "FP32", [1, 16]).contents.fp32_contents.extend([1.0] * 15)
    return request


def _typed_wrong_field() -> service_pb2.ModelInferRequest:
    request = _request()
    for name in ("INPUT0", "INPUT1"):
        raw_tensor(request, name, "FP32", [1, 16]).contents.int_contents.extend([1] * 16)
    return request


# (request, status code, message substring)
STUB_CASES = [
    pytest.param(
        lambda: _raw_simple(FP32_ROW[:-4], FP32_ROW),
        "INVALID_ARGUMENT",
        "unexpected total byte size 60 for input 'INPUT0', expecting 64",
        id="raw-size-short",
    ),
    pytest.param(
        lambda: _raw_simple(FP32_ROW, FP32_ROW + b"\0"),
        "INVALID_ARGUMENT",
        "unexpected total byte size 65 for input 'INPUT1', expecting 64",
        id="raw-size-long",
    ),
    pytest.param(
        lambda: _bytes_request(_length(1) + b"a" + b"\x02\x00", [1, 2]),
        "INVALID_ARGUMENT",
        "INPUT0",
        id="bytes-truncated-length",
    ),
    pytest.param(
        lambda: _bytes_request(_length(1) + b"a" + _length(100) + b"short", [1, 2]),
        "INVALID_ARGUMENT",
        "INPUT0",
        id="bytes-length-past-the-end",
    ),
    pytest.param(
        lambda: _bytes_request(_length(1) + b"a" + _length(1) + b"b" + b"extra", [1, 2]),
        "INVALID_ARGUMENT",
        "INPUT0",
        id="bytes-trailing-bytes",
    ),
    pytest.param(
        lambda: _bytes_request(_length(1) + b"a", [1, 2]),
        "INVALID_ARGUMENT",
        "INPUT0",
        id="bytes-fewer-elements",
    ),
    pytest.param(_extra_raw, "INVALID_ARGUMENT", "raw input contents", id="more-raw-than-inputs"),
    pytest.param(_fewer_raw, "INVALID_ARGUMENT", "raw input contents", id="fewer-raw-than-inputs"),
    pytest.param(
        _mixed,
        "INVALID_ARGUMENT",
        "contents field must not be specified when using raw_input_contents for 'INPUT1'",
        id="raw-and-contents-mixed",
    ),
    pytest.param(
        _mixed_one_raw, "INVALID_ARGUMENT", "'simple'", id="raw-for-one-contents-for-other"
    ),
    pytest.param(_unknown_datatype, "INVALID_ARGUMENT", "FP8", id="unknown-datatype"),
    pytest.param(_no_data, "INVALID_ARGUMENT", "INPUT0", id="input-without-data"),
    pytest.param(_negative_dim, "INVALID_ARGUMENT", "INPUT0", id="negative-dim"),
    pytest.param(
        _typed_count_mismatch,
        "INVALID_ARGUMENT",
        "INPUT0",
        id="typed-contents-count",
    ),
    pytest.param(_typed_wrong_field, "INVALID_ARGUMENT", "INPUT0", id="typed-contents-field"),
    pytest.param(
        lambda: _request(""),
        "NOT_FOUND",
        "Request for unknown model",
        id="empty-model-name",
    ),
]


@pytest.mark.parametrize(("request_of", "code", "text"), STUB_CASES)
def test_rejected_raw(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
    request_of: Callable[[], service_pb2.ModelInferRequest],
    code: str,
    text: str,
) -> None:
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request_of())
    assert str(error.value.code()) == f"StatusCode.{code}"
    assert text in error.value.details()


def test_server_still_serves_correctly_after_bad_requests(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert client.is_server_live()
    assert client.is_model_ready("simple")
    inputs, a, b = simple_inputs(2, seed=21)
    result = client.infer("simple", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


async def _good_request(client: aioclient.InferenceServerClient, seed: int) -> None:
    if seed % 2:
        inputs, a, b = simple_inputs(1 + seed % 8, seed=seed)
        result = await client.infer("simple", inputs, request_id=f"good-{seed}")
        assert result.get_response().id == f"good-{seed}"
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    else:
        words = sample_array("BYTES", (2, 3), seed)
        tensor = aioclient.InferInput("INPUT0", [2, 3], "BYTES")
        tensor.set_data_from_numpy(words)
        result = await client.infer("identity_bytes", [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == words.tolist()


async def _bad_request(client: aioclient.InferenceServerClient, seed: int) -> str:
    inputs, _, _ = simple_inputs(1, seed=seed)
    try:
        if seed % 3 == 0:
            await client.infer("simple", inputs[:1])
        elif seed % 3 == 1:
            await client.infer("no_such_model", inputs)
        else:
            wrong = aioclient.InferInput("INPUT1", [1, 16], "INT32")
            wrong.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
            await client.infer("simple", [inputs[0], wrong])
    except InferenceServerException as error:
        return str(error.status())
    return "OK"


def test_concurrent_good_requests_interleaved_with_bad_ones(convoy: ConvoyServer) -> None:
    async def run() -> list[object]:
        client = aioclient.InferenceServerClient(convoy.url)
        try:
            calls = []
            for seed in range(50):
                calls.append(_good_request(client, seed))
                calls.append(_bad_request(client, seed))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.close()

    outcomes = asyncio.run(run())
    good, bad = outcomes[0::2], outcomes[1::2]
    assert good == [None] * 50, [o for o in good if o is not None][:3]
    assert set(bad) == {"StatusCode.INVALID_ARGUMENT", "StatusCode.NOT_FOUND"}
    assert bad.count("StatusCode.NOT_FOUND") == len(range(1, 50, 3))
