"""A python worker's channel driven from the event loop (`send_async`, `receive_async`): the
loop never waits on the socket, messages larger than the socket's buffer or the reader's go
through all the same, and a worker's end or silence is reported as on the thread."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from backends.python._config import worker_spec
from backends.python._pickling import unstack_rows
from backends.python._process import AskAnswers, WorkerProcess
from backends.python._server_channel import WorkerFailure
from proto import model_config_pb2 as mc

# Y = X; a request whose first value is 1 sleeps 30 s first.
IDENTITY = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = request.inputs()[0].as_numpy()
            if x.flat[0] == 1:
                time.sleep(30)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[WorkerProcess]:
    """A worker whose shared memory holds 4 KiB each way: larger arrays go on the socket."""
    (tmp_path / "identity" / "1").mkdir(parents=True)
    (tmp_path / "identity" / "1" / "model.py").write_text(IDENTITY, encoding="utf-8")
    spec = worker_spec("identity_0", tmp_path / "identity", 1, mc.ModelConfig(name="identity"))
    answers = AskAnswers(lambda batch, index: False, lambda request: {"error": "none kept"})
    started = WorkerProcess.start(spec, _deadline_ns(60), answers, ring_bytes=64 + 4096)
    yield started
    started.kill()


def _deadline_ns(seconds: float) -> int:
    return time.monotonic_ns() + int(seconds * 1e9)


def _execute(batch: int, arrays: list[np.ndarray]) -> tuple[object, ...]:
    return ("execute", batch, [{"X": a} for a in arrays], ["Y"], [{} for _ in arrays])


async def test_a_batch_travels_both_ways_on_the_event_loop(worker: WorkerProcess) -> None:
    arrays = [np.full(4, value, dtype=np.float32) for value in (2, 3, 4)]
    await worker.send_async(_execute(0, arrays), _deadline_ns(10))
    reply = await worker.receive_async(_deadline_ns(10))
    assert reply[0] == "done" and reply[1] == 0
    # Small outputs come stacked, one array per name, each request's rows one after another.
    assert [payload["Y"].tolist() for payload in unstack_rows(reply[2])] == [
        a.tolist() for a in arrays
    ]


async def test_messages_larger_than_the_socket_and_the_reader_go_through(
    worker: WorkerProcess,
) -> None:
    large = np.arange(2 << 20, dtype=np.float32)  # 8 MiB each way, on the socket
    await worker.send_async(_execute(5, [large]), _deadline_ns(30))
    reply = await worker.receive_async(_deadline_ns(30))
    np.testing.assert_array_equal(reply[2][0]["Y"], large)


async def test_a_worker_that_ends_or_stays_silent_is_a_failure(
    worker: WorkerProcess,
) -> None:
    sleepy = [np.ones(4, dtype=np.float32)]  # sleeps 30 s
    await worker.send_async(_execute(1, sleepy), _deadline_ns(10))
    started = time.monotonic()
    with pytest.raises(WorkerFailure, match="did not answer in time") as silent:
        await worker.receive_async(_deadline_ns(0.3))
    assert silent.value.timed_out and time.monotonic() - started < 5
    asyncio.get_running_loop().call_later(0.2, os.kill, worker.pid, signal.SIGKILL)
    with pytest.raises(WorkerFailure, match=r"exited with code -9 \(SIGKILL\)") as ended:
        await worker.receive_async(_deadline_ns(10))
    assert ended.value.exit_code == -9


async def test_a_model_without_async_methods_runs_in_a_worker_without_asyncio(
    worker: WorkerProcess,
) -> None:
    # asyncio brings the ssl module, about 4 MiB a worker: only a model that needs an event
    # loop (an `async def` method) loads them. A batch first, so that everything execute
    # touches is loaded.
    await worker.send_async(_execute(0, [np.full(4, 2, dtype=np.float32)]), _deadline_ns(10))
    assert (await worker.receive_async(_deadline_ns(10)))[0] == "done"
    mapped = Path(f"/proc/{worker.pid}/maps").read_text()
    assert "_asyncio" not in mapped and "_ssl" not in mapped
