"""Large buffers kept by the C allocator (`server.contract.allocator`): a model.py that allocates
eight 1 MiB arrays together and frees them, round after round, takes its pages from the kernel
once, not every round, in its own process and in the server's; and a server whose environment
names the thresholds itself keeps them (glibc's defaults here: a page fault per page, each
round)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import IN_PROCESS, ConvoyServer

from scripts import models

ROUNDS = 20
PAGES_PER_ROUND = 8 * (1 << 20) // 4096

# Each request: one round to settle, then ROUNDS rounds; answers the process's minor page faults
# over those rounds.
PROBE = f"""
import resource

import numpy as np
import triton_python_backend_utils as pb_utils


def _round():
    held = [np.ones(1 << 20, np.uint8) for _ in range(8)]  # every page written
    return sum(int(array[-1]) for array in held)


class TritonPythonModel:
    def execute(self, requests):
        _round()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range({ROUNDS}):
            _round()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        out = pb_utils.Tensor("FAULTS", np.array([faults], np.int64))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""
IO = (
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    'output [ { name: "FAULTS" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
)
MODELS = ("probe", "probe_in_process")
# glibc's thresholds at start, named by the environment: the server must leave them.
DEFAULTS = "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("allocator") / "models"
    for name in MODELS:
        config = f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n' + IO
        if name.endswith("in_process"):
            config += IN_PROCESS
        models.write_python_model(repo, name, PROBE, config)
    return repo


def _faults(server: ConvoyServer, model: str) -> int:
    tensor = grpcclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    with grpcclient.InferenceServerClient(server.url) as client:
        answer = client.infer(model, [tensor]).as_numpy("FAULTS")
    assert answer is not None
    return int(answer[0])


@pytest.mark.parametrize("model", MODELS)
def test_large_buffers_are_reused_round_after_round(
    repository: Path, tmp_path: Path, model: str
) -> None:
    environment = {
        k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and "THRESHOLD" not in k
    }
    server = ConvoyServer(repository, tmp_path / "server.log", env=environment).start()
    try:
        # Less than one round's pages over all rounds: at most the odd page of other work.
        assert _faults(server, model) < PAGES_PER_ROUND
    finally:
        server.kill()


def test_the_environments_own_thresholds_are_kept(repository: Path, tmp_path: Path) -> None:
    environment = {**os.environ, "GLIBC_TUNABLES": DEFAULTS}
    server = ConvoyServer(repository, tmp_path / "server.log", env=environment).start()
    try:
        # Every round's pages fresh from the kernel, in the model's process and in the server's.
        for model in MODELS:
            assert _faults(server, model) >= ROUNDS * PAGES_PER_ROUND // 2
    finally:
        server.kill()
