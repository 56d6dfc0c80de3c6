"""The event loop's thread first (`server.contract.scheduling`), on a real server: every thread
of the serving process but the event loop's runs under SCHED_BATCH, as does a Python model's
worker process, and each front-end worker keeps its own loop first; with `CONVOY_LOOP_FIRST=0`
every thread and process keeps SCHED_OTHER."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer

from scripts import models
from scripts.drain_check import child_pids
from scripts.python_channel_bench import MODEL_PY as IDENTITY  # Y = X
from server.contract.scheduling import SWEEP_S, SWITCH

CONFIG = (
    'name: "identity"\nbackend: "python"\nmax_batch_size: 8\n'
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    "dynamic_batching { }\n"
)

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's policies only")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("scheduling") / "models"
    models.write_python_model(repo, "identity", IDENTITY, CONFIG)
    return repo


def _policies(pid: int) -> dict[int, int]:
    """Each thread of process `pid`: its scheduling policy."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
            found[int(task.name)] = os.sched_getscheduler(int(task.name))
    return found


def _children(pid: int) -> list[tuple[int, bytes]]:
    """Process `pid`'s children, with their command lines."""
    found = []
    for child in child_pids(pid):
        with contextlib.suppress(FileNotFoundError):
            found.append((child, Path(f"/proc/{child}/cmdline").read_bytes()))
    return found


def _infer(server: ConvoyServer) -> None:
    tensor = grpcclient.InferInput("X", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
    with grpcclient.InferenceServerClient(server.url) as client:
        for _ in range(5):  # gRPC's threads wake, and start as they need to
            answer = client.infer("identity", [tensor]).as_numpy("Y")
            assert answer is not None and answer.tolist() == [[1.0, 1.0]]


def _loop_first(pid: int) -> bool:
    """The process's main thread (its event loop's) under SCHED_OTHER, every other under
    SCHED_BATCH."""
    policies = _policies(pid)
    loop = policies.pop(pid)
    return loop == os.SCHED_OTHER and all(p == os.SCHED_BATCH for p in policies.values())


def _within_a_sweep(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 3 * SWEEP_S
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


@pytest.mark.parametrize("frontend_workers", [0, 2])
def test_every_thread_but_the_event_loops_runs_behind_it(
    repository: Path, tmp_path: Path, frontend_workers: int
) -> None:
    environ = {key: value for key, value in os.environ.items() if key != SWITCH}
    flags = ("--frontend-workers", str(frontend_workers)) if frontend_workers else ()
    server = ConvoyServer(repository, tmp_path / "server.log", *flags, env=environ)
    try:
        server.start()
        assert server.process is not None
        _infer(server)
        children = _children(server.process.pid)
        model_workers = [pid for pid, command in children if b"_worker.py" in command]
        front_ends = [pid for pid, command in children if b"frontend" in command]
        assert len(model_workers) == 1 and len(front_ends) == frontend_workers
        for serving in (server.process.pid, *front_ends):
            assert _within_a_sweep(lambda pid=serving: _loop_first(pid)), _policies(serving)
        assert set(_policies(model_workers[0]).values()) == {os.SCHED_BATCH}
    finally:
        server.kill()


def test_the_switch_leaves_every_thread_and_process_as_it_started(
    repository: Path, tmp_path: Path
) -> None:
    environ = {key: value for key, value in os.environ.items() if key != SWITCH}
    server = ConvoyServer(repository, tmp_path / "server.log", env=environ | {SWITCH: "0"})
    try:
        server.start()
        assert server.process is not None
        _infer(server)
        time.sleep(SWEEP_S + 0.5)  # past the first sweep there would have been
        processes = [server.process.pid] + [pid for pid, _ in _children(server.process.pid)]
        for pid in processes:
            assert set(_policies(pid).values()) == {os.SCHED_OTHER}
    finally:
        server.kill()
