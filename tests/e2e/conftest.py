"""End-to-end fixtures: a generated model repository and real `python -m server` processes.

`convoy` is the one server the whole session shares (non-strict readiness, so the broken models
beside the good ones do not make it unready); `start_server` starts short-lived servers for the
tests that stop one or need other flags. Both serve each test twice: with the front ends in the
core process, and in two front-end worker processes (`frontend_workers`). Nothing is mocked:
clients talk gRPC and HTTP over 127.0.0.1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import CLIENT_MAX_MESSAGE_BYTES, ConvoyServer, StartServer, build_repository
from tritonclient.grpc import service_pb2_grpc


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session", params=[0, 2], ids=["in-process", "workers"])
def frontend_workers(request: pytest.FixtureRequest) -> int:
    """How many front-end worker processes the servers of a test run (0: in the core)."""
    workers: int = request.param
    return workers


def _workers_flags(workers: int) -> tuple[str, ...]:
    return ("--frontend-workers", str(workers)) if workers else ()


@pytest.fixture(scope="session")
def convoy(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory, frontend_workers: int
) -> Iterator[ConvoyServer]:
    """The shared server, stopped with SIGTERM at the end of the session; it must exit 0."""
    log_path = tmp_path_factory.mktemp("convoy") / "server.log"
    server = ConvoyServer(
        model_repository, log_path, "--strict-readiness", "false", *_workers_flags(frontend_workers)
    )
    server.start()
    try:
        yield server
        code = server.stop()
        assert code == 0, f"server exited with {code}; log:\n{server.log()}"
    finally:
        server.kill()


@pytest.fixture
def start_server(tmp_path: Path, frontend_workers: int) -> Iterator[StartServer]:
    """Start short-lived servers: `start_server(repository, *flags)`; killed if still running.
    A test's own `--frontend-workers` wins over the fixture's."""
    started: list[ConvoyServer] = []

    def start(repository: Path, *flags: str) -> ConvoyServer:
        log_path = tmp_path / f"server-{len(started)}.log"
        server = ConvoyServer(repository, log_path, *_workers_flags(frontend_workers), *flags)
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
