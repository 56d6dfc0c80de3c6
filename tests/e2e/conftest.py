"""End-to-end fixtures: a generated model repository and real `python -m server` processes.

`convoy` is the one server the whole session shares (non-strict readiness, so the broken models
beside the good ones do not make it unready); `start_server` starts short-lived servers for the
tests that stop one or need other flags. Their front ends run in the core process: the process
boundary to front-end worker processes has its own tests (tests/server/test_workers_*.py, and
tests/e2e/test_e2e_workers.py for the processes themselves). Nothing is mocked: clients talk gRPC
and HTTP over 127.0.0.1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import (
    CLIENT_MAX_MESSAGE_BYTES,
    PYTHON_MODES,
    ConvoyServer,
    StartServer,
    build_repository,
)
from tritonclient.grpc import service_pb2_grpc


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"))


@pytest.fixture(params=PYTHON_MODES)
def python_mode(request: pytest.FixtureRequest) -> str:
    """Where the python models of a test run: their own processes, or the server's
    (`place_python_models`)."""
    mode: str = request.param
    return mode


@pytest.fixture(scope="session")
def convoy(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConvoyServer]:
    """The shared server, stopped with SIGTERM at the end of the session; it must exit 0."""
    log_path = tmp_path_factory.mktemp("convoy") / "server.log"
    server = ConvoyServer(model_repository, log_path, "--strict-readiness", "false")
    server.start()
    try:
        yield server
        code = server.stop()
        assert code == 0, f"server exited with {code}; log:\n{server.log()}"
    finally:
        server.kill()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start short-lived servers: `start_server(repository, *flags)`; killed if still running."""
    started: list[ConvoyServer] = []

    def start(repository: Path, *flags: str) -> ConvoyServer:
        log_path = tmp_path / f"server-{len(started)}.log"
        server = ConvoyServer(repository, log_path, *flags)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def subset_repository(model_repository: Path, tmp_path: Path) -> Callable[..., Path]:
    """A repository holding only the named models of the shared one (symlinked, not copied)."""

    def make(*names: str) -> Path:
        repo = tmp_path / "subset"
        repo.mkdir()
        for name in names:
            (repo / name).symlink_to(model_repository / name, target_is_directory=True)
        return repo

    return make


@pytest.fixture(scope="session")
def client(convoy: ConvoyServer) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(convoy.url)) as triton:
        yield triton


@pytest.fixture(scope="session")
def channel(convoy: ConvoyServer) -> Iterator[grpc.Channel]:
    options = [
        ("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", CLIENT_MAX_MESSAGE_BYTES),
    ]
    with grpc.insecure_channel(convoy.url, options=options) as opened:
        yield opened


@pytest.fixture(scope="session")
def stub(channel: grpc.Channel) -> service_pb2_grpc.GRPCInferenceServiceStub:
    """The raw protobuf stub tritonclient itself uses, for requests its API cannot build."""
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)
