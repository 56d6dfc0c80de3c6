"""`AdminRoutes`: the HTTP handlers of Triton's shared memory, trace and logging extensions,
backed by the objects the gRPC servicer uses (one registry, one LogControl, one TraceSettings),
and the parsing of the administrative bodies (register, repository load, logging)."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from proto import grpc_service_pb2 as pb
from server.cuda_shm import NO_CUDA_SHM, CudaSharedMemoryRegistry
from server.errors import InvalidInputError, UnsupportedError
from server.http.codec import JsonObject, parameters_of, parse_json
from server.logs import LogControl
from server.repository import Repository
from server.shm import Region, SharedMemoryRegistry
from server.tracing import TraceSettings

_NO_CUDA_SHM_OVER_HTTP = "CUDA shared memory is not supported over HTTP yet; use gRPC"
_FIXED_TRACE = (
    "trace settings cannot be changed in OpenTelemetry mode; set them with --trace-config at start"
)
_NO_LOGS = "log settings are not available in this process"


def region_json(region: Region) -> JsonObject:
    return {
        "name": region.name,
        "key": region.key,
        "offset": region.offset,
        "byte_size": region.byte_size,
    }


def register_request(body: JsonObject) -> tuple[str, int, int]:
    """(key, offset, byte_size) of a register body; offset defaults to 0, as Triton's."""
    key = body.get("key")
    if not isinstance(key, str):
        raise InvalidInputError("Shared memory register request has no 'key' string field")
    values = []
    for name, required in (("offset", False), ("byte_size", True)):
        value = body.get(name, None if required else 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidInputError(
                f"Shared memory register request needs '{name}' as an integer >= 0, "
                f"got {value!r:.80}"
            )
        values.append(value)
    return key, values[0], values[1]


def load_request(model: str, body: JsonObject) -> pb.RepositoryModelLoadRequest:
    """The gRPC load request of an HTTP load body (`config` JSON, `file:` content in base64)."""
    request = pb.RepositoryModelLoadRequest(model_name=model)
    for key, value in parameters_of(body, f"load of model '{model}'").items():
        if key == "config":
            if not isinstance(value, str):
                raise InvalidInputError("load parameter 'config' must be a string of JSON")
            request.parameters[key].string_param = value
        elif key.startswith("file:"):
            if not isinstance(value, str):
                raise InvalidInputError(f"load parameter '{key}' must be a base64 string")
            try:
                request.parameters[key].bytes_param = base64.b64decode(value, validate=True)
            except binascii.Error as exc:
                raise InvalidInputError(f"load parameter '{key}' is not base64: {exc}") from exc
    return request


def trace_json(settings: TraceSettings) -> JsonObject:
    """The trace settings as Triton's HTTP front end shows them in OpenTelemetry mode."""
    return {
        "trace_level": [settings.level],
        "trace_rate": str(settings.rate),
        "trace_count": str(settings.count),
        "trace_mode": "opentelemetry",
    }


def log_changes(body: JsonObject) -> dict[str, bool | int | str]:
    """The settings a logging body changes; null values change nothing, as in Triton."""
    changes: dict[str, bool | int | str] = {}
    for key, value in body.items():
        if value is None:
            continue
        if not isinstance(value, bool | int | str):
            raise InvalidInputError(f"log setting '{key}' must be a boolean, integer or string")
        changes[key] = value
    return changes


class AdminRoutes:
    """Handlers for `v2/systemsharedmemory`, `v2/cudasharedmemory`, `v2[/models/{m}]/trace/
    setting` and `v2/logging`."""

    def __init__(
        self,
        repository: Repository,
        shm: SharedMemoryRegistry,
        trace: TraceSettings,
        logs: LogControl | None,
        cuda_shm: CudaSharedMemoryRegistry | None = None,
    ) -> None:
        self._repository = repository
        self._shm = shm
        self._cuda_shm = cuda_shm  # None: no usable GPU, and gRPC refuses CUDA regions too
        self._trace = trace
        self._logs = logs

    async def shm_status(self, request: web.Request) -> web.Response:
        regions = self._shm.status(request.match_info.get("region", ""))
        return web.json_response([region_json(region) for region in regions])

    async def shm_register(self, request: web.Request) -> web.Response:
        key, offset, byte_size = register_request(parse_json(await request.read()))
        self._shm.register(request.match_info["region"], key, offset, byte_size)
        return web.Response(status=200)

    async def shm_unregister(self, request: web.Request) -> web.Response:
        self._shm.unregister(request.match_info.get("region", ""))
        return web.Response(status=200)

    async def cuda_shm(self, request: web.Request) -> web.Response:
        # Without a GPU, the refusal gRPC's CUDA shared memory RPCs give; with one, gRPC serves
        # CUDA regions and HTTP does not register them yet.
        raise UnsupportedError(NO_CUDA_SHM if self._cuda_shm is None else _NO_CUDA_SHM_OVER_HTTP)

    async def cuda_shm_status(self, request: web.Request) -> web.Response:
        region = request.match_info.get("region", "")
        if self._cuda_shm is None:
            if region:
                return await self.cuda_shm(request)
            return web.json_response([])  # no GPU: no regions
        return web.json_response(
            [
                {"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                for r in self._cuda_shm.status(region)
            ]
        )

    async def cuda_shm_unregister(self, request: web.Request) -> web.Response:
        # Unregistering every region succeeds without a GPU: there is none (clients clean up
        # both kinds of shared memory this way).
        region = request.match_info.get("region", "")
        if self._cuda_shm is not None:
            self._cuda_shm.unregister(region)
        elif region:
            return await self.cuda_shm(request)
        return web.Response(status=200)

    async def trace_setting(self, request: web.Request) -> web.Response:
        model = request.match_info.get("model", "")
        if model and not self._repository.is_ready(model):
            raise InvalidInputError(f"Request for unknown model : {model}")
        if request.method == "POST" and parse_json(await request.read()):
            raise UnsupportedError(_FIXED_TRACE)  # as the gRPC TraceSetting answers
        return web.json_response(trace_json(self._trace))

    async def logging(self, request: web.Request) -> web.Response:
        if self._logs is None:
            raise UnsupportedError(_NO_LOGS)
        if request.method == "POST":
            self._logs.update(log_changes(parse_json(await request.read())))
        return web.json_response(self._logs.settings())
