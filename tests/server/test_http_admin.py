"""The HTTP front end's routes and the pure parts of its shared memory, trace and log handlers."""

from __future__ import annotations

import base64

import pytest

from server.contract.errors import InvalidInputError
from server.contract.settings import TraceSettings
from server.core.engine import Engine
from server.core.local import LocalCore
from server.core.repository import Repository
from server.core.shared_memory.regions import SharedMemory
from server.core.shared_memory.system import SharedMemoryRegistry
from server.frontend.grpc import RESTRICTABLE_GROUPS
from server.frontend.http import HttpFrontEnd
from server.frontend.http.admin import (
    cuda_register_request,
    log_changes,
    register_request,
    trace_json,
)


def test_register_body_as_triton_reads_it() -> None:
    assert register_request({"key": "/k", "byte_size": 64}) == ("/k", 0, 64)
    assert register_request({"key": "/k", "offset": 8, "byte_size": 64}) == ("/k", 8, 64)
    for body in ({"byte_size": 64}, {"key": "/k"}, {"key": "/k", "byte_size": -1}):
        with pytest.raises(InvalidInputError, match="register request"):
            register_request(body)


def _cuda_body(fields: dict[str, object], handle: bytes = bytes(64)) -> dict[str, object]:
    """A CUDA register body as tritonclient.http sends it, with `fields` replaced (None: left
    out)."""
    body = {
        "raw_handle": {"b64": base64.b64encode(handle).decode()},
        "device_id": 0,
        "byte_size": 64,
    }
    return {key: value for key, value in {**body, **fields}.items() if value is not None}


def test_cuda_register_body_as_tritonclient_sends_it() -> None:
    handle = bytes(range(64))  # a cudaIpcMemHandle_t's 64 bytes
    assert cuda_register_request(_cuda_body({"device_id": 1, "byte_size": 128}, handle)) == (
        handle,
        1,
        128,
    )


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"raw_handle": None}, "needs 'raw_handle' as an object whose 'b64' string"),
        ({"raw_handle": "AAAA"}, "needs 'raw_handle' as an object whose 'b64' string"),
        ({"raw_handle": {"b64": 64}}, "needs 'raw_handle' as an object whose 'b64' string"),
        ({"raw_handle": {"b64": "not base64!"}}, "'raw_handle' is not base64"),
        ({"device_id": None}, "needs 'device_id' as an integer >= 0, got None"),
        ({"device_id": -1}, "needs 'device_id' as an integer >= 0, got -1"),
        ({"device_id": True}, "needs 'device_id' as an integer >= 0, got True"),
        ({"byte_size": "64"}, "needs 'byte_size' as an integer >= 0, got '64'"),
        ({"byte_size": -64}, "needs 'byte_size' as an integer >= 0, got -64"),
    ],
)
def test_a_bad_cuda_register_body_says_which_field(
    fields: dict[str, object], expected: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"CUDA shared memory register request.*{expected}"):
        cuda_register_request(_cuda_body(fields))


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
    core = LocalCore(Engine(Repository((), 1)), SharedMemory(SharedMemoryRegistry()))
    front = HttpFrontEnd(core, "0", False, 1024)
    routes = front.routes()
    assert {group for _, _, _, group in routes} == RESTRICTABLE_GROUPS
    paths = {(method, path) for method, path, _, _ in routes}
    assert len(paths) == len(routes)  # no route twice
    assert ("POST", "/v2/models/{model}/versions/{version}/generate_stream") in paths
    assert ("POST", "/v2/systemsharedmemory/region/{region}/register") in paths
    assert ("POST", "/v2/cudasharedmemory/region/{region}/register") in paths
