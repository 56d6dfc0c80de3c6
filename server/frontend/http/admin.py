"""`AdminRoutes`: the HTTP handlers of Triton's shared memory, trace and logging extensions,
backed by the objects the gRPC servicer uses (one SharedMemory, LogControl and TraceSettings),
and the parsing of the administrative bodies (register, repository load, logging)."""

from __future__ import annotations

import base64
import binascii

from proto import grpc_service_pb2 as pb
from server.contract.core import NO_CUDA_SHM, Core
from server.contract.errors import LOAD_NOT_POLLED, InvalidInputError, UnsupportedError
from server.contract.settings import TraceSettings
from server.frontend.http.codec import JsonObject, parameters_of, parse_json
from server.frontend.http.messages import Request, Response, json_response

_FIXED_TRACE = (
    "trace settings cannot be changed in OpenTelemetry mode; set them with --trace-config at start"
)


def region_json(region: pb.SystemSharedMemoryStatusResponse.RegionStatus) -> JsonObject:
    return {
        "name": region.name,
        "key": region.key,
        "offset": region.offset,
        "byte_size": region.byte_size,
    }


def cuda_region_json(region: pb.CudaSharedMemoryStatusResponse.RegionStatus) -> JsonObject:
    return {"name": region.name, "device_id": region.device_id, "byte_size": region.byte_size}


def register_request(body: JsonObject) -> tuple[str, int, int]:
    """(key, offset, byte_size) of a register body; offset defaults to 0, as Triton's."""
    key = body.get("key")
    if not isinstance(key, str):
        raise InvalidInputError("Shared memory register request has no 'key' string field")
    offset = _nonnegative(body, "offset", "Shared memory", default=0)
    return key, offset, _nonnegative(body, "byte_size", "Shared memory")


def cuda_register_request(body: JsonObject) -> tuple[bytes, int, int]:
    """(raw_handle, device_id, byte_size) of a CUDA register body, whose handle (a serialized
    cudaIpcMemHandle_t) is base64 in `{"raw_handle": {"b64": ...}}`, as tritonclient sends it."""
    handle = body.get("raw_handle")
    encoded = handle.get("b64") if isinstance(handle, dict) else None
    if not isinstance(encoded, str):
        raise InvalidInputError(
            "CUDA shared memory register request needs 'raw_handle' as an object whose 'b64' "
            f"string is the base64 of a cudaIpcMemHandle_t, got {handle!r:.80}"
        )
    try:
        raw_handle = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise InvalidInputError(
            f"CUDA shared memory register request: 'raw_handle' is not base64: {exc}"
        ) from exc
    device_id = _nonnegative(body, "device_id", "CUDA shared memory")
    return raw_handle, device_id, _nonnegative(body, "byte_size", "CUDA shared memory")


def _nonnegative(body: JsonObject, key: str, kind: str, default: int | None = None) -> int:
    # A register body's integer field (required unless it has a default), >= 0.
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError(
            f"{kind} register request needs '{key}' as an integer >= 0, got {value!r:.80}"
        )
    return value


def load_request(model: str, body: JsonObject) -> pb.RepositoryModelLoadRequest:
    """The gRPC load request of an HTTP load body (`config` JSON, `file:` content in base64)."""
    request = pb.RepositoryModelLoadRequest(model_name=model)
    for key, value in parameters_of(body, f"load of model '{model}'").items():
        if key == "config":
            if not isinstance(value, str):
                raise LOAD_NOT_POLLED(
                    model=model, reason="load parameter 'config' must be a string of JSON"
                )
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
        core: Core,
        trace: TraceSettings,
    ) -> None:
        self._core = core
        self._trace = trace

    async def shm_status(self, request: Request) -> Response:
        status = await self._core.system_shm_status(request.match_info.get("region", ""))
        return json_response([region_json(region) for region in status.regions.values()])

    async def shm_register(self, request: Request) -> Response:
        key, offset, byte_size = register_request(parse_json(request.body))
        await self._core.system_shm_register(request.match_info["region"], key, offset, byte_size)
        return Response()

    async def shm_unregister(self, request: Request) -> Response:
        await self._core.system_shm_unregister(request.match_info.get("region", ""))
        return Response()

    async def cuda_shm_status(self, request: Request) -> Response:
        status = await self._core.cuda_shm_status(request.match_info.get("region", ""))
        return json_response([cuda_region_json(region) for region in status.regions.values()])

    async def cuda_shm_register(self, request: Request) -> Response:
        if not self._core.info.cuda_shared_memory:  # without a GPU, refused whatever the body
            raise UnsupportedError(NO_CUDA_SHM)
        raw_handle, device_id, byte_size = cuda_register_request(parse_json(request.body))
        await self._core.cuda_shm_register(
            request.match_info["region"], raw_handle, device_id, byte_size
        )
        return Response()

    async def cuda_shm_unregister(self, request: Request) -> Response:
        await self._core.cuda_shm_unregister(request.match_info.get("region", ""))
        return Response()

    async def trace_setting(self, request: Request) -> Response:
        model = request.match_info.get("model", "")
        if model and not await self._core.model_ready(model, ""):
            raise InvalidInputError(f"Request for unknown model : {model}")
        if request.method == "POST" and parse_json(request.body):
            raise UnsupportedError(_FIXED_TRACE)  # as the gRPC TraceSetting answers
        return json_response(trace_json(self._trace))

    async def logging(self, request: Request) -> Response:
        changes = log_changes(parse_json(request.body)) if request.method == "POST" else {}
        return json_response(await self._core.log_settings(changes))
