"""Inference requests passed on as their bytes (server.frontend.grpc.forward): the core decodes
and answers a unary ModelInfer as the in-process servicer does, and through the process boundary
(both sides in one process over a socket pair) it answers the same bytes, the same errors and
the same load, with large requests and answers in the arenas and a cancelled call cancelled in
the core; a stream's request answers the same responses, decoupled ones and in-band failures
included."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import numpy as np
import pytest

from proto import grpc_service_pb2 as pb
from server.contract.errors import DeadlineExceededError, InvalidInputError, ServerError
from server.core.local import LocalCore
from server.frontend import SerializedAnswer
from server.frontend.grpc import serve_serialized, serve_serialized_stream
from server.frontend.grpc.forward import NOT_A_REQUEST
from tests.server.boundary import ARENA_BYTES, SLOW_S, Boundary

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _serialized(model: str, **arrays: np.ndarray[Any, Any]) -> bytes:
    """perf_analyzer's way: one raw entry per input, an id, Triton's flag parameter."""
    request = pb.ModelInferRequest(model_name=model, id=f"{model}-1")
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    for name, array in arrays.items():
        datatype = "FP32" if array.dtype == np.float32 else "INT32"
        request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    return request.SerializeToString()


def _simple() -> bytes:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return _serialized("simple", INPUT0=a, INPUT1=np.ones((1, 16), np.float32))


def _rows(rows: int) -> bytes:
    """`identity_fp32` of `rows` rows of 16 bytes: the request and its answer are over
    `messages.INLINE_MAX_BYTES` from 513 rows on, and find the arenas full over `ARENA_BYTES`."""
    return _serialized("identity_fp32", INPUT0=np.arange(rows * 4, dtype=np.float32).reshape(-1, 4))


def _outputs(answer: SerializedAnswer) -> dict[str, np.ndarray[Any, Any]]:
    response = pb.ModelInferResponse.FromString(answer.data)
    return {
        tensor.name: np.frombuffer(raw, np.float32).reshape(tensor.shape)
        for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


async def _outcome(call: Awaitable[SerializedAnswer]) -> Any:
    try:
        return await call
    except ServerError as exc:
        return (type(exc), str(exc))


async def test_the_core_answers_the_bytes_as_the_servicer_answers_the_call(
    served: LocalCore,
) -> None:
    answer = await serve_serialized(served, _simple(), 0, False)
    response = pb.ModelInferResponse.FromString(answer.data)
    assert (response.model_name, response.model_version, response.id) == ("simple", "1", "simple-1")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    outputs = _outputs(answer)
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + 1)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - 1)
    assert answer.load is None


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_simple(), id="small: in the messages"),
        pytest.param(_rows(4096), id="both ways in the arenas"),
        pytest.param(_rows(2 * ARENA_BYTES // 16), id="larger than the arenas"),
    ],
)
async def test_through_the_boundary_the_answer_is_the_same_bytes(
    served: LocalCore, boundary: Boundary, data: bytes
) -> None:
    for _ in range(3):  # the arenas' blocks come back: the same sizes fit again
        through = await boundary.client.infer_serialized(data, 0, False)
        assert through == await serve_serialized(served, data, 0, False)


async def test_many_calls_at_once_each_get_their_own_answer(boundary: Boundary) -> None:
    rows = [1 + seed % 700 for seed in range(100)]
    answers = await asyncio.gather(
        *(boundary.client.infer_serialized(_rows(count), 0, False) for count in rows)
    )
    for count, answer in zip(rows, answers, strict=True):
        expected = np.arange(count * 4, dtype=np.float32).reshape(-1, 4)
        np.testing.assert_array_equal(_outputs(answer)["OUTPUT0"], expected)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_serialized("nope"), id="unknown model"),
        pytest.param(_serialized("simple", INPUT0=np.zeros((1, 16), np.int32)), id="datatype"),
    ],
)
async def test_a_refused_call_fails_with_the_cores_error(
    served: LocalCore, boundary: Boundary, data: bytes
) -> None:
    direct = await _outcome(serve_serialized(served, data, 0, False))
    assert isinstance(direct, tuple) and issubclass(direct[0], ServerError)
    assert await _outcome(boundary.client.infer_serialized(data, 0, False)) == direct


async def test_bytes_that_are_no_request_are_invalid_input(boundary: Boundary) -> None:
    refused = await _outcome(boundary.client.infer_serialized(b"\xff\xff", 0, False))
    assert refused[0] is InvalidInputError and refused[1].startswith(NOT_A_REQUEST)


async def test_the_load_comes_back_when_asked_for(boundary: Boundary) -> None:
    asked = await boundary.client.infer_serialized(_simple(), 0, True)
    assert asked.load is not None and asked.load.in_flight >= 0
    assert (await boundary.client.infer_serialized(_simple(), 0, False)).load is None


async def test_a_deadline_passed_in_the_queue_is_never_executed(
    served: LocalCore, boundary: Boundary
) -> None:
    def slow(value: float) -> bytes:
        return _serialized("slow", X=np.array([[value]], np.float32))

    running = asyncio.create_task(boundary.client.infer_serialized(slow(1.0), 0, False))
    await asyncio.sleep(SLOW_S / 4)  # the first executes; the second waits behind it
    before = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    deadline_ns = time.monotonic_ns() + int(SLOW_S / 4 * 1e9)
    expired = await _outcome(boundary.client.infer_serialized(slow(2.0), deadline_ns, False))
    assert expired[0] is DeadlineExceededError
    await running
    after = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    assert after.success.count - before.success.count == 1  # the first only
    assert after.compute_infer.count - before.compute_infer.count == 1


async def test_a_cancelled_call_is_cancelled_in_the_core(
    served: LocalCore, boundary: Boundary
) -> None:
    def slow(value: float) -> bytes:
        return _serialized("slow", X=np.array([[value]], np.float32))

    before = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    running = asyncio.create_task(boundary.client.infer_serialized(slow(1.0), 0, False))
    await asyncio.sleep(SLOW_S / 4)
    queued = asyncio.create_task(boundary.client.infer_serialized(slow(2.0), 0, False))
    await asyncio.sleep(SLOW_S / 4)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    np.testing.assert_array_equal(_outputs(await running)["Y"], [[1.0]])
    after = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    assert after.success.count - before.success.count == 1
    assert after.fail.count - before.fail.count == 1  # the core counted the cancellation


async def _streamed(answers: AsyncIterator[bytes]) -> list[pb.ModelStreamInferResponse]:
    return [pb.ModelStreamInferResponse.FromString(data) async for data in answers]


async def _direct(core: LocalCore, data: bytes, load_format: str | None = None) -> list[Any]:
    answers: list[pb.ModelStreamInferResponse] = []
    await serve_serialized_stream(
        core,
        data,
        0,
        load_format,
        lambda answer, final: answers.append(pb.ModelStreamInferResponse.FromString(answer)),
    )
    return answers


def _count(count: int) -> bytes:
    """A request of the decoupled `repeat` model for `count` responses (-1: it fails)."""
    request = pb.ModelInferRequest(model_name="repeat", id=f"repeat-{count}")
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    request.inputs.add(name="COUNT", datatype="INT32", shape=[1, 1])
    request.raw_input_contents.append(np.array([[count]], np.int32).tobytes())
    return request.SerializeToString()


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_simple(), id="a model that answers once"),
        pytest.param(_rows(4096), id="both ways in the arenas"),
        pytest.param(_count(0), id="decoupled, no response"),
        pytest.param(_count(5), id="decoupled, five responses"),
        pytest.param(_count(-1), id="decoupled, failing in-band"),
        pytest.param(_serialized("nope"), id="an unknown model, in-band"),
    ],
)
async def test_a_stream_request_through_the_boundary_answers_the_same_responses(
    served: LocalCore, boundary: Boundary, data: bytes
) -> None:
    through = await _streamed(boundary.client.infer_serialized_stream(data, 0, None))
    assert through == await _direct(served, data)
    last = through[-1]  # final, or an in-band failure (which ends the request too)
    assert last.error_message or last.infer_response.parameters["triton_final_response"].bool_param


async def test_a_stream_request_that_is_no_request_fails_in_band(boundary: Boundary) -> None:
    (answer,) = await _streamed(boundary.client.infer_serialized_stream(b"\xff\xff", 0, None))
    assert answer.error_message.startswith(NOT_A_REQUEST)


async def test_each_stream_response_carries_the_load_when_asked(boundary: Boundary) -> None:
    (answer,) = await _streamed(boundary.client.infer_serialized_stream(_simple(), 0, "json"))
    report = answer.infer_response.parameters["endpoint-load-metrics"].string_param
    assert report.startswith("JSON ") and "convoy_load_ratio" in report


async def test_a_stream_request_left_behind_is_cancelled_in_the_core(
    served: LocalCore, boundary: Boundary
) -> None:
    def slow(value: float) -> bytes:
        return _serialized("slow", X=np.array([[value]], np.float32))

    async def first(data: bytes) -> bytes:
        async for answer in boundary.client.infer_serialized_stream(data, 0, None):
            return answer
        raise AssertionError("no answer")

    before = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    running = asyncio.create_task(first(slow(1.0)))
    await asyncio.sleep(SLOW_S / 4)
    queued = asyncio.create_task(first(slow(2.0)))
    await asyncio.sleep(SLOW_S / 4)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    response = pb.ModelStreamInferResponse.FromString(await running).infer_response
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [1.0]
    after = (await served.model_statistics("slow", "")).model_stats[0].inference_stats
    assert after.success.count - before.success.count == 1
    assert after.fail.count - before.fail.count == 1  # the core counted the cancellation
