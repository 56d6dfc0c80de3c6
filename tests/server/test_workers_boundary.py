"""The process boundary, both sides in one process over a socket pair: a `CoreClient` (what a
front-end worker's front ends call) talks to a `WorkerLink` serving a real `LocalCore` (a real
repository of generated models, real batchers and instances), through real memfd arenas.

Every `Core` method must answer through the boundary exactly as the core answers in process:
the same values, the same error class and message. This is what running the end-to-end suite a
second time through worker processes used to check; the process-level behaviour (a worker's
death and replacement, shared ports, signals) stays in tests/e2e/test_e2e_workers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm

from server.contract.core import Core
from server.contract.errors import ServerError, ServerStoppingError, UnavailableError
from server.contract.requests import InferInput, InferOptions, InferRequest, SequenceFlags
from server.contract.responses import InferResponse
from server.core.local import LocalCore
from server.workers import messages
from server.workers.client import CORE_GONE
from tests.server.boundary import ARENA_BYTES, SLOW_S, Boundary, connect, disconnect

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _outcome(call: Awaitable[Any]) -> Any:
    """What a call gives: its value, or its error's class and message."""
    try:
        return await call
    except ServerError as exc:
        return (type(exc), str(exc))


def _simple(seed: int = 0, rows: int = 1) -> InferRequest:
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((rows, 16)).astype(np.float32) for _ in range(2))
    inputs = [InferInput("INPUT0", "FP32", a.shape, a), InferInput("INPUT1", "FP32", b.shape, b)]
    return InferRequest("simple", "", inputs, [], InferOptions(), request_id=f"r{seed}")


def _request(model: str, name: str, datatype: str, array: Any, **fields: Any) -> InferRequest:
    tensor = InferInput(name, datatype, array.shape, array)
    return InferRequest(model, "", [tensor], [], InferOptions(**fields))


def _rows(rows: int) -> InferRequest:
    """`identity_fp32` of `rows` rows of 16 bytes: over 512 rows the tensors leave their message
    for the arenas (`messages.INLINE_MAX_BYTES`); over `ARENA_BYTES` they find the arenas full
    and travel in their message again."""
    array = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return _request("identity_fp32", "INPUT0", "FP32", array)


def _same(through: InferResponse, direct: InferResponse) -> None:
    assert (through.model, through.version) == (direct.model, direct.version)
    assert [o.spec for o in through.outputs] == [o.spec for o in direct.outputs]
    for ours, theirs in zip(through.outputs, direct.outputs, strict=True):
        assert ours.shape == theirs.shape
        assert ours.array is not None and theirs.array is not None
        assert ours.array.dtype == theirs.array.dtype
        np.testing.assert_array_equal(ours.array, theirs.array)


Call = Callable[[Core], Awaitable[Any]]
CONTROL_CALLS: dict[str, Call] = {
    "server_ready": lambda core: core.server_ready(),
    "model_ready": lambda core: core.model_ready("simple", ""),
    "model_ready of a missing version": lambda core: core.model_ready("simple", "7"),
    "check_model": lambda core: core.check_model("simple"),
    "check_model of an unknown model": lambda core: core.check_model("nope"),
    "model_metadata": lambda core: core.model_metadata("simple", ""),
    "model_metadata of a bad version": lambda core: core.model_metadata("simple", "x"),
    "model_config": lambda core: core.model_config("accumulate", "1"),
    "model_io": lambda core: core.model_io("identity_bytes", ""),
    "model_statistics of every model": lambda core: core.model_statistics("", ""),
    "repository_index": lambda core: core.repository_index(False),
    "repository_index, ready only": lambda core: core.repository_index(True),
    "load_model of an unknown model": lambda core: core.load_model("nope", None, {}),
    "system_shm_status": lambda core: core.system_shm_status(""),
    "system_shm_status of an unknown region": lambda core: core.system_shm_status("nope"),
    "system_shm_register of a missing key": lambda core: core.system_shm_register(
        "r", "/convoy-no-such-key", 0, 64
    ),
    "system_shm_unregister of an unknown region": lambda core: core.system_shm_unregister("n"),
    "cuda_shm_status": lambda core: core.cuda_shm_status(""),
    "cuda_shm_register without a GPU": lambda core: core.cuda_shm_register("c", bytes(64), 0, 64),
    "log_settings, read": lambda core: core.log_settings({}),
}


@pytest.mark.parametrize("call", CONTROL_CALLS.values(), ids=CONTROL_CALLS.keys())
async def test_every_control_call_answers_as_the_core_does(boundary: Boundary, call: Call) -> None:
    through = await _outcome(call(boundary.client))
    direct = await _outcome(call(boundary.core))
    assert through == direct


async def test_a_model_unloads_and_loads_again_through_the_boundary(boundary: Boundary) -> None:
    client = boundary.client
    await client.unload_model("identity_bytes", False)
    assert not await client.model_ready("identity_bytes", "")
    await client.load_model("identity_bytes", None, {})
    assert await client.model_ready("identity_bytes", "")


async def test_a_log_change_answers_every_setting_and_is_broadcast(boundary: Boundary) -> None:
    before = await boundary.core.log_settings({})
    try:
        answer = await boundary.client.log_settings({"log_verbose_level": 2})
        assert answer == await boundary.core.log_settings({})
        assert answer["log_verbose_level"] == 2
        assert boundary.logs_broadcast == [answer]  # the pool sends it to every worker
    finally:
        await boundary.core.log_settings({"log_verbose_level": before["log_verbose_level"]})


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _simple(1, rows=8), id="small tensors inline"),
        pytest.param(lambda: _rows(1024), id="tensors in the arenas"),
        pytest.param(lambda: _rows(100_000), id="tensors larger than the arenas"),
        pytest.param(
            lambda: _request(
                "identity_bytes",
                "INPUT0",
                "BYTES",
                np.array([[b"alpha", "\u00e9t\u00e9".encode(), b""]], dtype=object),
            ),
            id="BYTES",
        ),
        pytest.param(
            lambda: _request(
                "identity_bytes", "INPUT0", "BYTES", np.array([[b"x" * (2 * ARENA_BYTES)]], object)
            ),
            id="BYTES larger than the arena",
        ),
        pytest.param(
            lambda: _request(
                "accumulate",
                "INPUT",
                "INT32",
                np.array([[5]], np.int32),
                sequence=SequenceFlags("s1", start=True, end=True),
            ),
            id="a sequence's flags",
        ),
    ],
)
async def test_a_request_answers_as_the_core_does(
    boundary: Boundary, make: Callable[[], InferRequest]
) -> None:
    _same(await boundary.client.infer(make()), await boundary.core.infer(make()))


async def test_many_requests_at_once_each_get_their_own_answer(boundary: Boundary) -> None:
    requests = [_simple(seed, rows=1 + seed % 8) for seed in range(200)]
    through = await asyncio.gather(*(boundary.client.infer(r) for r in requests))
    direct = await asyncio.gather(*(boundary.core.infer(r) for r in requests))
    for ours, theirs in zip(through, direct, strict=True):
        _same(ours, theirs)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: InferRequest("nope", "", [], [], InferOptions()), id="model"),
        pytest.param(
            lambda: _request("simple", "INPUT0", "FP32", np.zeros((1, 16), np.float32)),
            id="missing input",
        ),
        pytest.param(
            lambda: _request("simple", "INPUT0", "INT32", np.zeros((1, 16), np.int32)),
            id="datatype",
        ),
        pytest.param(
            lambda: _request("simple", "INPUT0", "FP32", np.zeros((9, 16), np.float32)),
            id="batch too large",
        ),
        pytest.param(
            lambda: _request("repeat", "COUNT", "INT32", np.array([[1]], np.int32)),
            id="unary on a decoupled model",
        ),
    ],
)
async def test_a_refused_request_fails_with_the_cores_error(
    boundary: Boundary, make: Callable[[], InferRequest]
) -> None:
    through = await _outcome(boundary.client.infer(make()))
    direct = await _outcome(boundary.core.infer(make()))
    assert isinstance(direct, tuple) and issubclass(direct[0], ServerError)
    assert through == direct


async def _stream(core: Core, request: InferRequest) -> list[Any]:
    items = []
    async for item, final in core.infer_stream(request):
        if isinstance(item, InferResponse):
            assert all(output.array is not None for output in item.outputs)
            item = [output.array.tolist() for output in item.outputs]  # type: ignore[union-attr]
        elif isinstance(item, ServerError):
            item = (type(item), str(item))
        items.append((item, final))
    return items


@pytest.mark.parametrize("count", [0, 1, 5, -1], ids=["none", "one", "five", "in-band error"])
async def test_a_decoupled_stream_yields_what_the_core_yields(
    boundary: Boundary, count: int
) -> None:
    def request() -> InferRequest:
        return _request("repeat", "COUNT", "INT32", np.array([[count]], np.int32))

    through = await _stream(boundary.client, request())
    assert through == await _stream(boundary.core, request())
    assert through[-1][1] is True or through == []  # the last item, if any, is final


async def test_a_stream_of_a_non_decoupled_model_is_its_one_response(boundary: Boundary) -> None:
    through = await _stream(boundary.client, _simple(4))
    assert through == await _stream(boundary.core, _simple(4))
    assert len(through) == 1 and through[0][1] is True


async def test_a_stream_request_of_a_model_that_answers_once_is_served_without_an_iterator(
    boundary: Boundary,
) -> None:
    direct = await boundary.core.infer_streamed(_simple(4))
    assert isinstance(direct, InferResponse)
    _same(direct, await boundary.core.infer(_simple(4)))
    through = await boundary.client.infer_streamed(_simple(4))  # the worker's side cannot know
    assert not isinstance(through, InferResponse)
    items = [(item, final) async for item, final in through]
    assert len(items) == 1 and isinstance(items[0][0], InferResponse) and items[0][1] is True
    _same(items[0][0], direct)


async def test_a_stream_request_of_a_decoupled_model_is_served_through_its_iterator(
    boundary: Boundary,
) -> None:
    def request() -> InferRequest:
        return _request("repeat", "COUNT", "INT32", np.array([[3]], np.int32))

    outcome = await boundary.core.infer_streamed(request())
    assert not isinstance(outcome, InferResponse)
    finals = [final async for _, final in outcome]
    assert finals == [item[1] for item in await _stream(boundary.core, request())]
    with pytest.raises(ServerError):  # checked before any response: raised by the await
        await boundary.core.infer_streamed(
            _request("repeat", "COUNT", "FP32", np.array([[3]], np.float32))
        )


async def test_a_cancelled_request_is_cancelled_in_the_core(boundary: Boundary) -> None:
    def x(value: float) -> InferRequest:
        return _request("slow", "X", "FP32", np.array([[value]], np.float32))

    def counts() -> Awaitable[Any]:
        return boundary.core.model_statistics("slow", "")

    before = (await counts()).model_stats[0].inference_stats
    running = asyncio.create_task(boundary.client.infer(x(1.0)))
    await asyncio.sleep(SLOW_S / 4)  # the first executes; the second waits behind it
    queued = asyncio.create_task(boundary.client.infer(x(2.0)))
    await asyncio.sleep(SLOW_S / 4)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    response = await running
    assert response.outputs[0].array is not None and response.outputs[0].array.tolist() == [[1.0]]
    after = (await counts()).model_stats[0].inference_stats
    assert after.success.count - before.success.count == 1
    assert after.fail.count - before.fail.count == 1  # the core counted the cancellation


async def test_tensors_in_a_registered_region_are_read_and_written_by_the_core(
    boundary: Boundary,
) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), np.float32)
    key = f"/convoy-boundary-{id(boundary)}"
    handle = shm.create_shared_memory_region("boundary", key, 4 * a.nbytes)
    try:
        shm.set_shared_memory_region(handle, [a, b])
        await boundary.client.system_shm_register("boundary", key, 0, 4 * a.nbytes)
        status = await boundary.client.system_shm_status("boundary")
        assert status == await boundary.core.system_shm_status("boundary")
        request = InferRequest(
            "simple",
            "",
            [
                InferInput("INPUT0", "FP32", a.shape, None, ("boundary", 0, a.nbytes)),
                InferInput("INPUT1", "FP32", b.shape, None, ("boundary", a.nbytes, b.nbytes)),
            ],
            ["OUTPUT0", "OUTPUT1"],
            InferOptions(),
            output_locations={"OUTPUT0": ("boundary", 2 * a.nbytes, a.nbytes)},
        )
        response = await boundary.client.infer(request)
        written, answered = response.outputs
        assert written.array is None  # the core wrote it to the region
        assert answered.array is not None
        np.testing.assert_array_equal(answered.array, a - b)
        region = shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=2 * a.nbytes)
        np.testing.assert_array_equal(region, a + b)
        await boundary.client.system_shm_unregister("boundary")
        assert await _outcome(boundary.client.system_shm_status("boundary")) == await _outcome(
            boundary.core.system_shm_status("boundary")
        )
    finally:
        with contextlib.suppress(ServerError):
            await boundary.core.system_shm_unregister("boundary")
        shm.destroy_shared_memory_region(handle)


async def test_health_reaches_the_worker(boundary: Boundary) -> None:
    told: asyncio.Queue[bool] = asyncio.Queue()
    boundary.client.on_health = told.put_nowait
    boundary.link.send((messages.HEALTH, False))
    assert await asyncio.wait_for(told.get(), 5) is False


async def test_a_stopping_server_serves_what_was_sent_and_refuses_the_rest(
    served: LocalCore,
) -> None:
    boundary = await connect(served, ARENA_BYTES, [])
    try:
        sent = asyncio.create_task(boundary.client.infer(_simple(5)))
        await asyncio.sleep(0)  # the request is on its way to the core
        boundary.link.send((messages.STOPPING,))
        await asyncio.wait_for(boundary.link.stopped, 5)  # the worker said it sends no more
        _same(await sent, await served.infer(_simple(5)))
        with pytest.raises(ServerStoppingError):
            await boundary.client.infer(_simple(6))
    finally:
        await disconnect(boundary)


async def test_a_lost_core_fails_what_is_in_flight_and_refuses_the_rest(
    served: LocalCore,
) -> None:
    boundary = await connect(served, ARENA_BYTES, [])
    waiting = asyncio.create_task(
        boundary.client.infer(_request("slow", "X", "FP32", np.array([[3.0]], np.float32)))
    )
    streaming = boundary.client.infer_stream(
        _request("repeat", "COUNT", "INT32", np.array([[1]], np.int32))
    )
    await asyncio.sleep(SLOW_S / 4)
    boundary.link.channel.close()  # as the core process's end closing
    await boundary.client.lost
    for call in (waiting, boundary.client.infer(_simple(7)), boundary.client.server_ready()):
        assert await _outcome(call) == (UnavailableError, CORE_GONE)
    with pytest.raises(UnavailableError, match=CORE_GONE):
        async for _ in streaming:
            pass
    boundary.link.close()
