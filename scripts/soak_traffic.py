"""The soak's traffic (scripts/soak.py): each kind a loop on its own thread until stopped, every
answer checked against NumPy, and the tally of what was sent, answered and failed."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.client import HTTPException
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

RETRYABLE = {"StatusCode.UNAVAILABLE", "503", "StatusCode.CANCELLED"}
# A killed model worker fails the batch it ran, and the sequences begun on it, as INTERNAL.
KILLED_MODEL_WORKER = "killed model worker"
RETRYABLE_AFTER = {KILLED_MODEL_WORKER: RETRYABLE | {"StatusCode.INTERNAL"}}
_AFTER_S = 5.0  # how long after a reload or a killed worker its refusals are owed to it
_RETRY_S = 0.05  # a client's pause before it retries


class Tally:
    """Counts per traffic kind and outcome, shared by the threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.faults: list[str] = []
        self.disturbed: list[tuple[float, str]] = []  # (monotonic time, what): reloads, kills

    def add(self, kind: str, outcome: str) -> None:
        with self._lock:
            self.counts[(kind, outcome)] += 1

    def disturb(self, what: str) -> None:
        with self._lock:
            self.disturbed.append((time.monotonic(), what))

    def cause(self, status: str | None = None) -> str | None:
        """The disturbance of the last few seconds a refusal with `status` (None: a lost
        connection) is owed to: the latest that explains it; None: none."""
        with self._lock:
            recent = [what for at, what in self.disturbed if time.monotonic() - at < _AFTER_S]
        owed = [
            what
            for what in recent
            if status is None or status in RETRYABLE_AFTER.get(what, RETRYABLE)
        ]
        return owed[-1] if owed else None

    def fault(self, kind: str, what: str) -> None:
        with self._lock:
            self.counts[(kind, "FAULT")] += 1
            if len(self.faults) < 20:
                self.faults.append(f"{kind}: {what}")


def _inputs(module: Any, rng: np.random.Generator) -> tuple[list[Any], np.ndarray, np.ndarray]:
    a = rng.random((1, 16), dtype=np.float32)
    b = rng.random((1, 16), dtype=np.float32)
    tensors = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors, a, b


def _outcome(tally: Tally, kind: str, error: InferenceServerException) -> None:
    """A deadline the client set, or a retryable refusal owed to a recent disturbance (the
    client pauses, then goes on); anything else is a fault."""
    status = str(error.status())
    if "DEADLINE" in status or "Deadline" in status:
        tally.add(kind, status)
        return
    cause = tally.cause(status)
    if cause is not None:
        tally.add(kind, f"{status} after a {cause}")
        time.sleep(_RETRY_S)
    else:
        tally.fault(kind, f"{status} {error.message()}")


def _check(tally: Tally, kind: str, result: Any, a: np.ndarray, b: np.ndarray) -> None:
    if np.array_equal(result.as_numpy("OUTPUT0"), a + b) and np.array_equal(
        result.as_numpy("OUTPUT1"), a - b
    ):
        tally.add(kind, "OK")
    else:
        tally.fault(kind, "a wrong answer")


def _infer_once(
    tally: Tally, kind: str, module: Any, client: Any, rng: np.random.Generator, **options: Any
) -> None:
    """One request to `simple` through `client` (of tritonclient's `module`), tallied."""
    inputs, a, b = _inputs(module, rng)
    try:
        _check(tally, kind, client.infer("simple", inputs, **options), a, b)
    except InferenceServerException as error:
        _outcome(tally, kind, error)


def unary(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        while not stop.is_set():
            _infer_once(tally, "unary", grpcclient, client, rng)


def http(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        with contextlib.closing(httpclient.InferenceServerClient(http_url)) as client:
            while not stop.is_set():
                try:
                    _infer_once(tally, "http", httpclient, client, rng)
                except (OSError, HTTPException):  # its worker was killed: a client reconnects
                    cause = tally.cause()
                    if cause is None:
                        tally.fault("http", "the connection closed with nothing disturbed")
                    else:
                        tally.add("http", f"connection lost after a {cause}")
                    break


def cancelled(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    """Calls whose deadline is far too short: they are cancelled, the server must not mind."""
    rng = np.random.default_rng(seed)
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        while not stop.is_set():
            _infer_once(tally, "cancelled", grpcclient, client, rng, client_timeout=0.002)
            stop.wait(0.01)  # a cancellation now and then, not a flood


def streams(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    """Streams of eight requests each; every id answered exactly once."""
    rng = np.random.default_rng(seed)
    round_number = 0
    while not stop.is_set():
        answers: queue.Queue[Any] = queue.Queue()
        client = grpcclient.InferenceServerClient(url)
        sent: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        try:
            client.start_stream(
                callback=lambda result, error, sink=answers: sink.put(error or result)
            )
            for index in range(8):
                inputs, a, b = _inputs(grpcclient, rng)
                request_id = f"{seed}-{round_number}-{index}"
                sent[request_id] = (a, b)
                client.async_stream_infer("simple", inputs, request_id=request_id)
            seen: set[str] = set()
            for _ in sent:
                try:
                    answer = answers.get(timeout=30)
                except queue.Empty:
                    tally.fault("stream", "a stream request was never answered")
                    break
                if isinstance(answer, InferenceServerException):
                    # The stream itself broke (its worker was killed): nothing more comes on it.
                    _outcome(tally, "stream", answer)
                    unanswered = len(sent) - len(seen) - 1
                    for _ in range(unanswered):
                        tally.add("stream", "lost with its stream")
                    break
                request_id = answer.get_response().id
                if request_id in seen:
                    tally.fault("stream", f"request {request_id} answered twice")
                    continue
                seen.add(request_id)
                _check(tally, "stream", answer, *sent[request_id])
        finally:
            client.stop_stream()
            client.close()
        round_number += 1


def shared_memory(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 2 * 16 * 4
    names = (f"soak_in_{seed}", f"soak_out_{seed}")
    handles = [shm.create_shared_memory_region(n, f"/{n}_{os.getpid()}", size) for n in names]
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        try:
            for name in names:
                client.register_system_shared_memory(name, f"/{name}_{os.getpid()}", size)
            while not stop.is_set():
                a = rng.random((1, 16), dtype=np.float32)
                b = rng.random((1, 16), dtype=np.float32)
                shm.set_shared_memory_region(handles[0], [a, b])
                inputs = []
                for index, tensor_name in enumerate(("INPUT0", "INPUT1")):
                    tensor = grpcclient.InferInput(tensor_name, [1, 16], "FP32")
                    tensor.set_shared_memory(names[0], 64, offset=64 * index)
                    inputs.append(tensor)
                outputs = []
                for index, tensor_name in enumerate(("OUTPUT0", "OUTPUT1")):
                    output = grpcclient.InferRequestedOutput(tensor_name)
                    output.set_shared_memory(names[1], 64, offset=64 * index)
                    outputs.append(output)
                try:
                    client.infer("simple", inputs, outputs=outputs)
                except InferenceServerException as error:
                    _outcome(tally, "shm", error)
                    continue
                got = shm.get_contents_as_numpy(handles[1], np.float32, [2, 16])
                if np.array_equal(got[0], (a + b)[0]) and np.array_equal(got[1], (a - b)[0]):
                    tally.add("shm", "OK")
                else:
                    tally.fault("shm", "a wrong answer")
        finally:
            with contextlib.suppress(InferenceServerException):
                for name in names:
                    client.unregister_system_shared_memory(name)
            for handle in handles:
                shm.destroy_shared_memory_region(handle)


def _sequences(url: str, tally: Tally, stop: threading.Event, seed: int, model: str) -> None:
    """Sequences of five requests on `model`; each answer the running total."""
    shape = [1] if model == "accumulate_python" else [1, 1]  # that one does not batch
    sequence = seed * 1_000_000
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        while not stop.is_set():
            sequence += 1
            total = 0
            for step in range(5):
                value = step + 1
                tensor = grpcclient.InferInput("INPUT", shape, "INT32")
                tensor.set_data_from_numpy(np.full(shape, value, np.int32))
                try:
                    result = client.infer(
                        model,
                        [tensor],
                        sequence_id=sequence,
                        sequence_start=step == 0,
                        sequence_end=step == 4,
                    )
                except InferenceServerException as error:
                    _outcome(tally, model, error)
                    break  # a reload (or a killed model worker) ends it: start a new one
                total += value
                if int(result.as_numpy("OUTPUT").reshape(-1)[0]) == total:
                    tally.add(model, "OK")
                else:
                    tally.fault(model, f"sequence {sequence}: a wrong running total")
                    break


def sequences(url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int) -> None:
    """`accumulate`: the state is the server's (implicit state)."""
    _sequences(url, tally, stop, seed, "accumulate")


def python_sequences(
    url: str, http_url: str, tally: Tally, stop: threading.Event, seed: int
) -> None:
    """`accumulate_python`: model.py keeps the state, in its worker process."""
    _sequences(url, tally, stop, seed, "accumulate_python")


TRAFFIC: tuple[Callable[[str, str, Tally, threading.Event, int], None], ...] = (
    unary,
    http,
    cancelled,
    streams,
    shared_memory,
    sequences,
    python_sequences,
)
