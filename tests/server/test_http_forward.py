"""An HTTP infer request passed on as its body (server.frontend.http.forward): through the
process boundary (both sides in one process over a socket pair) it answers the same body, the
same header length, the same errors and the same load as the core gives them, with large bodies
and answers in the arenas."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from server.contract.errors import ServerError
from server.core.local import LocalCore
from server.frontend import SerializedAnswer
from server.frontend.http import serve_http
from tests.server.boundary import Boundary

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _json(model: str, **inputs: list[Any]) -> bytes:
    return json.dumps(
        {
            "id": f"{model}-1",
            "inputs": [
                {"name": name, "shape": [1, len(values)], "datatype": "FP32", "data": values}
                for name, values in inputs.items()
            ],
        }
    ).encode()


def _binary(rows: int) -> tuple[bytes, str]:
    """`identity_fp32` of `rows` rows of 16 bytes, in and out as binary data: the body and its
    JSON header's length."""
    array = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": list(array.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + array.tobytes(), str(len(header))


async def _outcome(core: Any, *args: Any) -> Any:
    try:
        return await core(*args)
    except ServerError as exc:
        return (type(exc), str(exc))


SIMPLE = _json("simple", INPUT0=[float(i) for i in range(16)], INPUT1=[1.0] * 16)


@pytest.mark.parametrize(
    ("model", "body", "header_length"),
    [
        pytest.param("simple", SIMPLE, None, id="JSON"),
        pytest.param("identity_fp32", *_binary(2), id="binary, small"),
        pytest.param("identity_fp32", *_binary(4096), id="binary, both ways in the arenas"),
        pytest.param("identity_fp32", *_binary(2 * (1 << 20) // 16), id="larger than the arenas"),
    ],
)
async def test_through_the_boundary_the_answer_is_the_same(
    served: LocalCore, boundary: Boundary, model: str, body: bytes, header_length: str | None
) -> None:
    for _ in range(3):  # the arenas' blocks come back: the same sizes fit again
        through = await boundary.client.infer_http(model, "", body, header_length, False)
        assert through == await serve_http(served, model, "", body, header_length, False)
    assert (through.header_length is None) == (header_length is None)


async def test_a_json_answer_holds_the_outputs(boundary: Boundary) -> None:
    answer = await boundary.client.infer_http("simple", "", SIMPLE, None, False)
    document = json.loads(answer.data)
    assert document["id"] == "simple-1"
    outputs = {output["name"]: output["data"] for output in document["outputs"]}
    assert outputs["OUTPUT0"] == [float(i) + 1 for i in range(16)]
    assert answer.load is None


@pytest.mark.parametrize(
    ("model", "body", "header_length"),
    [
        pytest.param("nope", SIMPLE, None, id="unknown model"),
        pytest.param("simple", b"{not json", None, id="not JSON"),
        pytest.param("simple", SIMPLE, "99999", id="header length past the body"),
        pytest.param("simple", _json("simple", INPUT0=[1.0]), None, id="an input missing"),
    ],
)
async def test_a_refused_request_fails_with_the_cores_error(
    served: LocalCore, boundary: Boundary, model: str, body: bytes, header_length: str | None
) -> None:
    direct = await _outcome(serve_http, served, model, "", body, header_length, False)
    assert isinstance(direct, tuple) and issubclass(direct[0], ServerError)
    through = await _outcome(boundary.client.infer_http, model, "", body, header_length, False)
    assert through == direct


async def test_the_load_comes_back_when_asked_for(boundary: Boundary) -> None:
    asked: SerializedAnswer = await boundary.client.infer_http("simple", "", SIMPLE, None, True)
    assert asked.load is not None and asked.load.in_flight >= 0
