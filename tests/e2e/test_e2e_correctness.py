"""What ModelInfer computes: the server's outputs against onnxruntime run in-process on the same
model files, every data type through its identity model (raw and typed contents), versions."""

from __future__ import annotations

from pathlib import Path

import grpc
import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import (
    AUTOCOMPLETE_MODEL,
    IDENTITY_TYPES,
    NO_BATCH_DIMS,
    NO_BATCH_MODEL,
    VERSIONS_ALL_MODEL,
    VERSIONS_LATEST_MODEL,
    bits,
    identity_model,
    infer_input,
    raw_tensor,
    sample_array,
    simple_inputs,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

# Typed `contents` field of each wire type; FP16 and BF16 have none and travel raw only.
CONTENTS_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
IDENTITY_SHAPE = (2, 4)
BYTES_SHAPE = (2, 4)


def _reference(
    model_repository: Path, model: str, feed: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """onnxruntime's outputs for the model file the server loaded, with the server's threading."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(model_repository / model / "1" / "model.onnx"),
        sess_options=options,
        providers=["CPUExecutionProvider"],
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def _assert_matches(
    result: grpcclient.InferResult, expected: dict[str, np.ndarray], datatype: str
) -> None:
    response = result.get_response()
    assert [o.name for o in response.outputs] == list(expected)
    for name, want in expected.items():
        got = result.as_numpy(name)
        assert got.shape == want.shape, name
        if datatype.startswith("FP"):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
    assert {o.datatype for o in response.outputs} == {datatype}


@pytest.mark.parametrize(("model", "datatype"), [("simple", "FP32"), ("simple_int32", "INT32")])
def test_simple_matches_onnxruntime(
    client: grpcclient.InferenceServerClient, model_repository: Path, model: str, datatype: str
) -> None:
    inputs, a, b = simple_inputs(3, datatype, seed=7)
    result = client.infer(model, inputs)
    expected = _reference(model_repository, model, {"INPUT0": a, "INPUT1": b})
    _assert_matches(result, expected, datatype)
    assert result.get_response().model_name == model
    assert result.get_response().model_version == "1"


def test_mlp_matches_onnxruntime(
    client: grpcclient.InferenceServerClient, model_repository: Path
) -> None:
    x = np.random.default_rng(11).standard_normal((5, 256), dtype=np.float32)
    result = client.infer("mlp", [infer_input("INPUT", x, "FP32")])
    _assert_matches(result, _reference(model_repository, "mlp", {"INPUT": x}), "FP32")


@pytest.mark.parametrize("batch", [1, 2])
def test_resnet18_matches_onnxruntime(
    client: grpcclient.InferenceServerClient, model_repository: Path, batch: int
) -> None:
    x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224), dtype=np.float32)
    result = client.infer("resnet18", [infer_input("input", x, "FP32")])
    expected = _reference(model_repository, "resnet18", {"input": x})
    _assert_matches(result, expected, "FP32")
    assert result.as_numpy("output").shape == (batch, 1000)


def test_identity_bytes_matches_onnxruntime(
    client: grpcclient.InferenceServerClient, model_repository: Path
) -> None:
    words = sample_array("BYTES", BYTES_SHAPE)
    result = client.infer("identity_bytes", [infer_input("INPUT0", words, "BYTES")])
    text = np.vectorize(lambda w: w.decode("utf-8"), otypes=[object])(words)
    (expected,) = _reference(model_repository, "identity_bytes", {"INPUT0": text}).values()
    got = result.as_numpy("OUTPUT0")
    assert got.shape == BYTES_SHAPE
    assert got.tolist() == [[s.encode("utf-8") for s in row] for row in expected.tolist()]
    assert got.tolist() == words.tolist()


@pytest.mark.parametrize("datatype", list(IDENTITY_TYPES))
def test_every_data_type_round_trips_raw(
    client: grpcclient.InferenceServerClient, datatype: str
) -> None:
    shape = BYTES_SHAPE if datatype == "BYTES" else IDENTITY_SHAPE
    sent = sample_array(datatype, shape, seed=3)
    result = client.infer(identity_model(datatype), [infer_input("INPUT0", sent, datatype)])
    (output,) = result.get_response().outputs
    assert (output.name, output.datatype, list(output.shape)) == ("OUTPUT0", datatype, list(shape))
    received = result.as_numpy("OUTPUT0")
    assert received.dtype == sent.dtype
    np.testing.assert_array_equal(bits(received), bits(sent))


def test_bf16_is_carried_as_its_bits(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    # tritonclient >= r26.06 takes ml_dtypes.bfloat16 arrays (checked above); an older client or
    # another language sends the 16-bit patterns itself, as here.
    values = np.array([[1.0, -2.5, 0.0, 3.140625], [65280.0, -0.0, np.inf, 0.5]], np.float32)
    patterns = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    request = service_pb2.ModelInferRequest(model_name="identity_bf16")
    raw_tensor(request, "INPUT0", "BF16", list(patterns.shape))
    request.raw_input_contents.append(patterns.tobytes())
    response = stub.ModelInfer(request)
    assert response.outputs[0].datatype == "BF16"
    echoed = np.frombuffer(response.raw_output_contents[0], dtype="<u2").reshape(patterns.shape)
    np.testing.assert_array_equal(echoed, patterns)
    np.testing.assert_array_equal(echoed.view(ml_dtypes.bfloat16).astype(np.float32), values)


def _typed_request(datatype: str, sent: np.ndarray) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=identity_model(datatype))
    tensor = raw_tensor(request, "INPUT0", datatype, list(sent.shape))
    values = sent.ravel().tolist()
    getattr(tensor.contents, CONTENTS_FIELDS[datatype]).extend(values)
    return request


@pytest.mark.parametrize("datatype", list(CONTENTS_FIELDS))
def test_every_typed_contents_field_round_trips(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str
) -> None:
    shape = BYTES_SHAPE if datatype == "BYTES" else IDENTITY_SHAPE
    sent = sample_array(datatype, shape, seed=5)
    response = stub.ModelInfer(_typed_request(datatype, sent))
    # Triton always answers in raw_output_contents, whatever the request used.
    (output,) = response.outputs
    assert not output.HasField("contents")
    assert len(response.raw_output_contents) == 1
    result = grpcclient.InferResult(response)
    received = result.as_numpy("OUTPUT0").reshape(shape)
    np.testing.assert_array_equal(bits(received.astype(sent.dtype)), bits(sent))


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_typed_contents_of_fp16_and_bf16_are_rejected(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str
) -> None:
    request = service_pb2.ModelInferRequest(model_name=identity_model(datatype))
    tensor = raw_tensor(request, "INPUT0", datatype, [1, 4])
    tensor.contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(grpc.RpcError) as error:
        stub.ModelInfer(request)
    assert error.value.code().name == "INVALID_ARGUMENT"
    assert datatype in error.value.details()


def test_bytes_with_utf8_and_empty_strings(client: grpcclient.InferenceServerClient) -> None:
    words = np.array([["", "ü", "", "🚀🚀"], ["日本語", "", "tab\tnewline\n", ""]], dtype=object)
    result = client.infer("identity_bytes", [infer_input("INPUT0", words, "BYTES")])
    received = result.as_numpy("OUTPUT0")
    assert received.tolist() == [[w.encode("utf-8") for w in row] for row in words.tolist()]


def test_bytes_that_are_not_utf8_are_refused_for_onnx_models(
    client: grpcclient.InferenceServerClient,
) -> None:
    # ONNX Runtime's Python binding takes strings as text only: a clear INVALID_ARGUMENT, not
    # a server fault, and the next request is served.
    blobs = np.array([[b"\xff\xfe", b"\x80", bytes(range(1, 256))]], dtype=object)
    with pytest.raises(InferenceServerException) as error:
        client.infer("identity_bytes", [infer_input("INPUT0", blobs, "BYTES")])
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "not valid UTF-8" in error.value.message()
    words = np.array([[b"ok"]], dtype=object)
    result = client.infer("identity_bytes", [infer_input("INPUT0", words, "BYTES")])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"ok"]]


def test_bytes_of_all_empty_strings(client: grpcclient.InferenceServerClient) -> None:
    words = np.array([[b"", b"", b""]], dtype=object)
    result = client.infer("identity_bytes", [infer_input("INPUT0", words, "BYTES")])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"", b"", b""]]


def test_a_requested_subset_of_outputs(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs(2, seed=9)
    result = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert len(result.get_response().raw_output_contents) == 1
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    assert result.as_numpy("OUTPUT0") is None


def test_outputs_in_the_order_requested(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs(1, seed=10)
    requested = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT1", "OUTPUT0")]
    result = client.infer("simple", inputs, outputs=requested)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_request_id_is_echoed(client: grpcclient.InferenceServerClient) -> None:
    inputs, _, _ = simple_inputs(1)
    assert client.infer("simple", inputs, request_id="req-42 ü").get_response().id == "req-42 ü"
    assert client.infer("simple", inputs).get_response().id == ""


def test_non_batching_model_takes_full_shapes(client: grpcclient.InferenceServerClient) -> None:
    sent = sample_array("FP32", NO_BATCH_DIMS, seed=4)
    result = client.infer(NO_BATCH_MODEL, [infer_input("INPUT0", sent, "FP32")])
    np.testing.assert_array_equal(bits(result.as_numpy("OUTPUT0")), bits(sent))


def test_auto_completed_model_serves_up_to_its_max_batch_size(
    client: grpcclient.InferenceServerClient,
) -> None:
    inputs, a, b = simple_inputs(4, seed=12)
    result = client.infer(AUTOCOMPLETE_MODEL, inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    too_many, _, _ = simple_inputs(5)
    with pytest.raises(InferenceServerException) as error:
        client.infer(AUTOCOMPLETE_MODEL, too_many)
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "batch-size must be <= 4" in error.value.message()


@pytest.mark.parametrize(
    ("model", "version", "answered", "operation"),
    [
        (VERSIONS_ALL_MODEL, "", "2", "sub"),
        (VERSIONS_ALL_MODEL, "1", "1", "add"),
        (VERSIONS_ALL_MODEL, "2", "2", "sub"),
        (VERSIONS_LATEST_MODEL, "", "2", "sub"),
        (VERSIONS_LATEST_MODEL, "2", "2", "sub"),
    ],
)
def test_model_version_selects_the_model_file(
    client: grpcclient.InferenceServerClient,
    model: str,
    version: str,
    answered: str,
    operation: str,
) -> None:
    inputs, a, b = simple_inputs(1, seed=13)
    result = client.infer(model, inputs, model_version=version)
    assert result.get_response().model_version == answered
    expected = a + b if operation == "add" else a - b  # version 2 swaps Add and Sub
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), expected, rtol=1e-6)


def test_a_version_outside_the_policy_is_not_found(
    client: grpcclient.InferenceServerClient,
) -> None:
    inputs, _, _ = simple_inputs(1)
    with pytest.raises(InferenceServerException) as error:
        client.infer(VERSIONS_LATEST_MODEL, inputs, model_version="1")
    assert error.value.status() == "StatusCode.NOT_FOUND"
    assert f"'{VERSIONS_LATEST_MODEL}' version 1 is not found" in error.value.message()
