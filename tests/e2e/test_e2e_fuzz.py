"""A bounded fuzz run against a real server: a few thousand requests over both protocols, most of
them malformed in random ways (names, data types, shapes, contents, parameters, bodies) and every
fifth a valid one. No malformed request that parses is answered INTERNAL or UNKNOWN (HTTP 500),
every valid one is answered exactly, and the server stays up."""

from __future__ import annotations

import json
import random
import struct
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import grpc
import numpy as np
from e2e_support import ConvoyServer
from tritonclient.grpc import service_pb2, service_pb2_grpc

REQUESTS = 1000  # per protocol (and per front-end mode: 4,000 in all)
WIRES = ["FP32", "INT32", "BYTES", "BOOL", "FP16", "UINT64", "FP33", ""]
NAMES = ["INPUT0", "INPUT1", "OUTPUT0", "", "x" * 200]
ARABIC_ONE = "\u0661"  # a Unicode digit: Python's int() reads it, Triton's grammar does not


def _dims(rng: random.Random) -> list[int]:
    choice = rng.random()
    if choice < 0.05:
        return [1] * rng.randint(63, 70)
    if choice < 0.1:
        return [rng.choice([2**40, 2**62, 2**63 - 1]), rng.randint(0, 3)]
    return [rng.choice([-1, 0, 1, 2, 16, 17, 1000]) for _ in range(rng.randint(0, 3))]


def _junk(rng: random.Random) -> bytes:
    if rng.random() < 0.3:  # BYTES-shaped, with lying lengths
        items = [rng.randbytes(rng.randint(0, 4)) for _ in range(rng.randint(0, 3))]
        lengths = [rng.choice([len(i), len(i) + 5, 2**32 - 1]) for i in items]
        return b"".join(struct.pack("<I", n) + i for n, i in zip(lengths, items, strict=True))
    return rng.randbytes(rng.choice([0, 3, 64, 128]))


def _valid_grpc(rng: random.Random) -> tuple[service_pb2.ModelInferRequest, np.ndarray]:
    a = rng.random() * np.ones((1, 16), np.float32)
    b = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="FP32")
        tensor.shape.extend([1, 16])
        request.raw_input_contents.append(array.tobytes())
    return request, a + b


def _bad_grpc(rng: random.Random) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=rng.choice(["simple", "simple", "nope"]))
    request.model_version = rng.choice(["", "", "1", "x", "-1", ARABIC_ONE, "99999999999999999999"])
    raw = rng.random() < 0.6
    for _ in range(rng.randint(0, 3)):
        tensor = request.inputs.add(name=rng.choice(NAMES), datatype=rng.choice(WIRES))
        tensor.shape.extend(d for d in _dims(rng) if d < 2**63)
        if rng.random() < 0.1:
            tensor.parameters["shared_memory_region"].string_param = "nowhere"
            tensor.parameters["shared_memory_byte_size"].int64_param = rng.randint(-3, 64)
        if raw:
            request.raw_input_contents.append(_junk(rng))
        elif rng.random() < 0.5:
            tensor.contents.fp32_contents.extend(rng.random() for _ in range(rng.randint(0, 20)))
        elif rng.random() < 0.5:
            tensor.contents.bytes_contents.extend(_junk(rng) for _ in range(rng.randint(0, 3)))
    if rng.random() < 0.3:
        output = request.outputs.add(name=rng.choice(NAMES))
        if rng.random() < 0.5:
            output.parameters["classification"].int64_param = rng.randint(-2, 3)
    for key in rng.sample(["priority", "timeout", "sequence_id", "sequence_end", "x"], 2):
        parameter = request.parameters[key]
        kind = rng.randint(0, 3)
        if kind == 0:
            parameter.int64_param = rng.randint(-(2**63), 2**63 - 1)
        elif kind == 1:
            parameter.string_param = "s"
        elif kind == 2:
            parameter.bool_param = True
        else:
            parameter.double_param = rng.random()
    return request


def test_grpc_fuzz_never_internal(convoy: ConvoyServer) -> None:
    rng = random.Random(13)
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(convoy.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for index in range(REQUESTS):
            if index % 5 == 0:
                request, expected = _valid_grpc(rng)
                answer = stub.ModelInfer(request, timeout=30)
                got = np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(1, 16)
                np.testing.assert_array_equal(got, expected)
                codes["OK (valid)"] += 1
                continue
            request = _bad_grpc(rng)
            try:
                stub.ModelInfer(request, timeout=30)
                codes["OK"] += 1
            except grpc.RpcError as error:
                code = error.code()
                assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
                    f"{code}: {error.details()} for {request}"
                )
                codes[code.name] += 1
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
    assert codes["OK (valid)"] == REQUESTS // 5
    assert codes["INVALID_ARGUMENT"] > REQUESTS // 2, codes


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randint(0, 6 if depth < 2 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**70, 3, 16])
    if kind == 3:
        return rng.choice(["", "FP32", "x", ARABIC_ONE])
    if kind == 4:
        return rng.random()
    if kind == 5:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["name", "shape", "data", "k"]): _json_value(rng, depth + 1)}


def _bad_http(rng: random.Random) -> tuple[str, bytes, dict[str, str]]:
    inputs = []
    binary = b""
    for _ in range(rng.randint(0, 3)):
        tensor: dict[str, Any] = {
            "name": rng.choice([*NAMES, 5]),
            "datatype": rng.choice([*WIRES, 7]),
            "shape": _dims(rng) if rng.random() < 0.8 else _json_value(rng),
        }
        if rng.random() < 0.5:
            chunk = _junk(rng)
            tensor["parameters"] = {"binary_data_size": rng.choice([len(chunk), 2, -1])}
            binary += chunk
        else:
            tensor["data"] = _json_value(rng)
        inputs.append(tensor)
    body: dict[str, Any] = {"inputs": inputs if rng.random() < 0.9 else _json_value(rng)}
    if rng.random() < 0.3:
        body["parameters"] = {"priority": _json_value(rng), "sequence_id": _json_value(rng)}
    if rng.random() < 0.2:
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {"classification": _json_value(rng)}}]
    header = json.dumps(body).encode()
    if rng.random() < 0.1:
        header = header[: rng.randint(0, len(header))]  # truncated JSON
    headers = {"Content-Type": "application/octet-stream"}
    if binary or rng.random() < 0.2:
        headers["Inference-Header-Content-Length"] = rng.choice(
            [str(len(header)), "0", "-3", "abc", str(len(header) + 99)]
        )
    version = rng.choice(["", "", "/versions/1", "/versions/x", "/versions/%D9%A1"])
    model = rng.choice(["simple", "simple", "nope"])
    return f"/v2/models/{model}{version}/infer", header + binary, headers


def _post(base: str, path: str, data: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_http_fuzz_never_internal(convoy: ConvoyServer) -> None:
    rng = random.Random(17)
    base = f"http://127.0.0.1:{convoy.http_port}"
    statuses: Counter[int] = Counter()
    for index in range(REQUESTS):
        if index % 5 == 0:
            a = [rng.random()] * 16
            body = {
                "inputs": [
                    {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
                ],
                "outputs": [{"name": "OUTPUT0"}],
            }
            status, data = _post(base, "/v2/models/simple/infer", json.dumps(body).encode(), {})
            assert status == 200, data
            got = json.loads(data)["outputs"][0]["data"]
            np.testing.assert_allclose(got, np.float32(a) + 1, rtol=1e-6)
            continue
        path, data, headers = _bad_http(rng)
        status, answer = _post(base, path, data, headers)
        assert status < 500, f"{status}: {answer[:300]!r} for {path} {data[:300]!r}"
        statuses[status] += 1
    status, _ = _post(base, "/v2/health/live", b"", {})
    assert statuses[400] > REQUESTS // 2, statuses
