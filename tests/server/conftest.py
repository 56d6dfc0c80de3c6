"""Fixtures shared by the process boundary's tests (tests/server/boundary.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from server.contract.logs import LogControl, LogState
from server.core.engine import Engine
from server.core.local import LocalCore
from server.core.repository import Repository
from server.core.shared_memory import SharedMemory, SharedMemoryRegistry
from tests.server.boundary import ARENA_BYTES, Boundary, connect, disconnect, write_repository


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCore]:
    """A core serving `write_repository`'s models, one for each test module that asks."""
    repository = Repository((write_repository(tmp_path_factory.mktemp("models")),), 4)
    engine = Engine(repository, strict_readiness=False)
    await repository.load_many()
    core = LocalCore(
        engine, SharedMemory(SharedMemoryRegistry()), LogControl(LogState()), client_shm=True
    )
    yield core
    await repository.unload_all(timeout_s=5.0)


@pytest_asyncio.fixture(loop_scope="module")
async def boundary(served: LocalCore) -> AsyncIterator[Boundary]:
    """`served` through the process boundary, a fresh connection for each test."""
    connected = await connect(served, ARENA_BYTES, [])
    yield connected
    await disconnect(connected)
