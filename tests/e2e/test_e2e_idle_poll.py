"""The event loop's idle poll (`--idle-poll-us`, `server.contract.idle_poll`) on a real server:
once its last request in flight is answered, the event loop's thread keeps polling for the
window, then sleeps; a window of 0 never polls, and neither does a server with front-end
workers. /proc counts CPU time in ticks of 10 ms, so the window here is long."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import ConvoyServer, StartServer
from onnx import TensorProto

from scripts import models
from scripts.drain_check import child_pids

WINDOW_US = 400_000
QUIET_S = 0.6  # past the window


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("idle-poll") / "models"
    config = models.identity_config("identity", TensorProto.FLOAT)
    models.write_model(repo, "identity", models.identity(TensorProto.FLOAT), config)
    return repo


def _cpu_s(pid: int) -> float:
    """The CPU time of process `pid` and of its children (front-end workers), in seconds."""
    pids = [pid, *child_pids(pid)]
    ticks = 0
    for each in pids:
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _answer(server: ConvoyServer) -> None:
    with grpcclient.InferenceServerClient(server.url) as client:
        tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
        result = client.infer("identity", [tensor])
        assert result.as_numpy("OUTPUT0").tolist() == [[1.0] * 4]


@pytest.mark.parametrize(
    ("flags", "polls"),
    [
        ((f"--idle-poll-us={WINDOW_US}",), True),
        (("--idle-poll-us=0",), False),
        ((f"--idle-poll-us={WINDOW_US}", "--frontend-workers=1"), False),
    ],
    ids=["window", "zero", "front-end workers"],
)
def test_the_loop_polls_for_its_window_after_an_answer_then_sleeps(
    start_server: StartServer, repository: Path, flags: tuple[str, ...], polls: bool
) -> None:
    server = start_server(repository, *flags)
    assert server.process is not None
    pid = server.process.pid
    _answer(server)  # the first request warms the path up
    time.sleep(QUIET_S)
    before_s = _cpu_s(pid)
    _answer(server)
    time.sleep(QUIET_S)
    after_answer_s = _cpu_s(pid) - before_s
    if polls:  # most of the 0.4 s window on a core, even on a busy machine
        assert after_answer_s >= 0.15
    else:
        assert after_answer_s < 0.1
    before_s = _cpu_s(pid)
    time.sleep(QUIET_S)
    assert _cpu_s(pid) - before_s < 0.05  # no traffic: nothing polls
