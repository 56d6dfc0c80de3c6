"""Property-based fuzzing of both protocols' decode and validation paths, in process: whatever a
client sends, decoding and checking it against a model either succeeds or raises one of the
contract's `ServerError`s (which the front ends answer with a clear status), never anything else
(the catch-all would answer INTERNAL)."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto import grpc_service_pb2 as pb
from server.contract.datatypes import BY_WIRE
from server.contract.errors import ServerError
from server.contract.model_io import ModelIO, check_request
from server.core.repository import parse_config
from server.frontend.grpc import codec as grpc_codec
from server.frontend.http import codec as http_codec

IO = ModelIO.from_config(
    parse_config(
        'name: "m" max_batch_size: 4 '
        'input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] }, '
        '{ name: "B" data_type: TYPE_STRING dims: [ -1 ] optional: true } ] '
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]',
        "inline",
    )
)
# CONVOY_FUZZ_EXAMPLES=20000 hunts longer than CI's default.
FUZZ = settings(
    max_examples=int(os.environ.get("CONVOY_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

names = st.sampled_from(["A", "B", "Y", "", "é", "A" * 300])
wires = st.sampled_from([*BY_WIRE, "FP33", "", "bytes"])
dims = st.one_of(
    st.integers(min_value=-3, max_value=8),
    st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1]),
)
shapes = st.one_of(st.lists(dims, max_size=5), st.lists(st.just(1), min_size=63, max_size=70))
scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)


def _bytes_elements(draw: Any) -> bytes:
    """A BYTES buffer: length-prefixed elements, sometimes with lying lengths."""
    parts = []
    for item in draw(st.lists(st.binary(max_size=6), max_size=4)):
        length = draw(st.sampled_from([len(item), len(item) + 3, 2**32 - 1]))
        parts.append(struct.pack("<I", length) + item)
    return b"".join(parts)


@st.composite
def grpc_requests(draw: Any) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", model_version=draw(st.sampled_from(["", "1"])))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        tensor = request.inputs.add(name=draw(names), datatype=draw(wires))
        tensor.shape.extend(draw(shapes.filter(lambda s: all(d < 2**63 for d in s))))
        if draw(st.booleans()):
            tensor.parameters["shared_memory_region"].string_param = "r"
            if draw(st.booleans()):
                tensor.parameters["shared_memory_byte_size"].int64_param = draw(
                    st.integers(min_value=-5, max_value=2**40)
                )
        if raw:
            request.raw_input_contents.append(
                draw(st.one_of(st.binary(max_size=40), st.builds(lambda: b"")))
                if draw(st.booleans())
                else _bytes_elements(draw)
            )
        elif draw(st.booleans()):
            tensor.contents.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=9)))
        elif draw(st.booleans()):
            tensor.contents.bytes_contents.extend(draw(st.lists(st.binary(max_size=4), max_size=4)))
        elif draw(st.booleans()):
            tensor.contents.int64_contents.extend(
                draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4))
            )
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        output = request.outputs.add(name=draw(names))
        if draw(st.booleans()):
            output.parameters["classification"].int64_param = draw(st.integers(-2, 5))
    for key in draw(
        st.lists(st.sampled_from(["priority", "timeout", "sequence_id", "sequence_start", "x"]))
    ):
        value = draw(scalars)
        parameter = request.parameters[key]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            if value < 0:
                parameter.int64_param = value
            else:
                parameter.uint64_param = min(value, 2**64 - 1)
        elif isinstance(value, float):
            parameter.double_param = value
        elif isinstance(value, str):
            parameter.string_param = value
    return request


@FUZZ
@given(grpc_requests())
def test_grpc_decode_and_check_raise_only_server_errors(request: pb.ModelInferRequest) -> None:
    try:
        inputs = grpc_codec.decode_inputs(request)
        outputs, _, _ = grpc_codec.decode_outputs(request)
        grpc_codec.infer_options(request)
        check_request(IO, [t for t in inputs if t.location is None], outputs)
    except ServerError:
        pass


json_values = st.recursive(
    st.one_of(st.none(), scalars.filter(lambda v: not isinstance(v, bytes))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def http_bodies(draw: Any) -> tuple[bytes, str | None]:
    inputs = []
    binary = b""
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        tensor: dict[str, Any] = {
            "name": draw(st.one_of(names, json_values)),
            "datatype": draw(st.one_of(wires, json_values)),
            "shape": draw(st.one_of(shapes, json_values)),
        }
        choice = draw(st.integers(min_value=0, max_value=3))
        if choice == 0:
            tensor["data"] = draw(json_values)
        elif choice == 1:
            chunk = draw(st.binary(max_size=24)) if draw(st.booleans()) else _bytes_elements(draw)
            tensor["parameters"] = {"binary_data_size": draw(st.sampled_from([len(chunk), 3, -1]))}
            binary += chunk
        elif choice == 2:
            tensor["parameters"] = draw(json_values)
        inputs.append(tensor)
    body: dict[str, Any] = {"inputs": draw(st.one_of(st.just(inputs), json_values))}
    if draw(st.booleans()):
        body["outputs"] = draw(
            st.one_of(
                st.lists(
                    st.fixed_dictionaries({"name": names}, optional={"parameters": json_values}),
                    max_size=3,
                ),
                json_values,
            )
        )
    if draw(st.booleans()):
        body["parameters"] = draw(json_values)
    header = json.dumps(body).encode()
    if not binary and draw(st.booleans()):
        return header, None
    length = draw(st.sampled_from([str(len(header)), "0", "-4", "x", str(len(header) + 9)]))
    return header + binary, length


@FUZZ
@given(http_bodies())
def test_http_decode_and_check_raise_only_server_errors(sent: tuple[bytes, str | None]) -> None:
    data, header_length = sent
    try:
        body, binary = http_codec.split_body(data, header_length)
        outputs, _ = http_codec.requested_outputs(body)
        inputs = http_codec.decode_inputs(body, binary, "m")
        http_codec.infer_options(body)
        http_codec.classification(body)
        http_codec.output_locations(body)
        check_request(IO, [t for t in inputs if t.location is None], outputs)
    except ServerError:
        pass
