"""The HTTP front end's routes and the pure parts of its shared memory, trace and log handlers."""

from __future__ import annotations

import pytest

from server.engine import Engine
from server.errors import InvalidInputError
from server.grpc import RESTRICTABLE_GROUPS
from server.http import HttpFrontEnd
from server.http.admin import log_changes, register_request, trace_json
from server.repository import Repository
from server.shm import SharedMemoryRegistry
from server.tracing import TraceSettings


def test_register_body_as_triton_reads_it() -> None:
    assert register_request({"key": "/k", "byte_size": 64}) == ("/k", 0, 64)
    assert register_request({"key": "/k", "offset": 8, "byte_size": 64}) == ("/k", 8, 64)
    for body in ({"byte_size": 64}, {"key": "/k"}, {"key": "/k", "byte_size": -1}):
        with pytest.raises(InvalidInputError, match="register request"):
            register_request(body)


def test_trace_settings_as_triton_shows_them() -> None:
    settings = TraceSettings(level="TIMESTAMPS", rate=7, count=3)
    assert trace_json(settings) == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "7",
        "trace_count": "3",
        "trace_mode": "opentelemetry",
    }


def test_log_changes_skip_nulls_and_refuse_objects() -> None:
    assert log_changes({"log_info": False, "log_file": None}) == {"log_info": False}
    with pytest.raises(InvalidInputError, match="log_format"):
        log_changes({"log_format": ["ISO8601"]})


def test_every_route_belongs_to_a_restrictable_group() -> None:
    engine = Engine(Repository((), 1))
    front = HttpFrontEnd(engine, "0", False, 1024, shm=SharedMemoryRegistry())
    routes = front.routes()
    assert {group for _, _, _, group in routes} == RESTRICTABLE_GROUPS
    paths = {(method, path) for method, path, _, _ in routes}
    assert len(paths) == len(routes)  # no route twice
    assert ("POST", "/v2/models/{model}/versions/{version}/generate_stream") in paths
    assert ("POST", "/v2/systemsharedmemory/region/{region}/register") in paths
