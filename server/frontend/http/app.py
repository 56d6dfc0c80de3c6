"""`HttpFrontEnd`: Triton's HTTP/REST v2 routes on aiohttp, in the server's event loop; thin:
JSON -> domain call -> JSON, the same calls the gRPC servicer makes. Routes of a protocol group
named by `--http-restricted-api` need its header."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from backends import BackendError
from batching import BatchingError
from proto import grpc_service_pb2 as pb
from proto import message_json
from server.contract.errors import (
    InvalidInputError,
    ModelControlDisabledError,
    RestrictedError,
    ServerError,
)
from server.contract.logs import LogControl
from server.contract.requests import InferRequest
from server.contract.settings import RestrictedProtocol, TraceSettings
from server.core.catalog import index_entries, model_metadata, model_statistics, statistics_targets
from server.core.engine import Engine
from server.core.shared_memory.regions import SharedMemory
from server.frontend.common import EXTENSIONS, load_parameters, server_metadata
from server.frontend.http.admin import AdminRoutes, load_request
from server.frontend.http.codec import (
    HEADER_LENGTH,
    decode_inputs,
    encode_response,
    infer_options,
    output_locations,
    parameters_of,
    parse_json,
    requested_outputs,
    split_body,
    trace_carrier,
)
from server.frontend.http.generate import GenerateRoutes
from server.frontend.http.status import http_status_for

_log = logging.getLogger(__name__)

# What GET /v2 advertises: the extensions this front end always implements (and CUDA shared
# memory where a GPU serves it).
HTTP_EXTENSIONS = (*EXTENSIONS, "binary_tensor_data")

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Domain errors answer `{"error": ...}` with their status; anything unexpected is 500."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (ServerError, BackendError, BatchingError) as exc:
        return web.json_response({"error": str(exc)}, status=http_status_for(exc))
    except Exception as exc:
        _log.exception("%s %s failed unexpectedly", request.method, request.path)
        return web.json_response({"error": f"internal error: {exc}"}, status=500)


def _model(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


def _guarded(handler: _Handler, rules: Sequence[RestrictedProtocol]) -> _Handler:
    """The handler behind its group's headers; a missing or wrong one is 403, as Triton's."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        for rule in rules:
            if request.headers.get(rule.header) != rule.value:
                raise RestrictedError(f"This API is restricted, expecting header '{rule.header}'")
        return await handler(request)

    return guarded


class HttpFrontEnd:
    """Every route this server answers over HTTP; started and stopped by `App`."""

    def __init__(
        self,
        engine: Engine,
        version: str,
        model_control: bool,
        max_body_bytes: int,
        *,
        shared_memory: SharedMemory,
        logs: LogControl | None = None,
        trace: TraceSettings | None = None,
        restricted: Sequence[RestrictedProtocol] = (),
    ) -> None:
        self._engine = engine
        self._repository = engine.repository
        self._version = version
        self._model_control = model_control  # explicit mode: load and unload are allowed
        self._max_body_bytes = max_body_bytes
        self._shared_memory = shared_memory  # the gRPC servicer's too: one set of regions
        self._admin = AdminRoutes(self._repository, shared_memory, trace or TraceSettings(), logs)
        self._generate = GenerateRoutes(engine)
        self._restricted = tuple(restricted)
        self._runner: web.AppRunner | None = None

    def routes(self) -> list[tuple[str, str, _Handler, str]]:
        """(method, path, handler, protocol group) of every route, as Triton's URLs."""
        admin = self._admin
        table: list[tuple[str, str, _Handler, str]] = [
            ("GET", "/v2/health/live", self.live, "health"),
            ("GET", "/v2/health/ready", self.ready, "health"),
            ("GET", "/v2", self.server_metadata, "metadata"),
            ("GET", "/v2/models/stats", self.statistics, "statistics"),
            ("POST", "/v2/repository/index", self.repository_index, "model-repository"),
            ("POST", "/v2/repository/models/{model}/load", self.load, "model-repository"),
            ("POST", "/v2/repository/models/{model}/unload", self.unload, "model-repository"),
            ("GET", "/v2/trace/setting", admin.trace_setting, "trace"),
            ("POST", "/v2/trace/setting", admin.trace_setting, "trace"),
            ("GET", "/v2/models/{model}/trace/setting", admin.trace_setting, "trace"),
            ("POST", "/v2/models/{model}/trace/setting", admin.trace_setting, "trace"),
            ("GET", "/v2/logging", admin.logging, "logging"),
            ("POST", "/v2/logging", admin.logging, "logging"),
        ]
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            table += [
                ("GET", prefix, self.model_metadata, "metadata"),
                ("GET", f"{prefix}/ready", self.model_ready, "health"),
                ("GET", f"{prefix}/config", self.model_config, "model-config"),
                ("GET", f"{prefix}/stats", self.statistics, "statistics"),
                ("POST", f"{prefix}/infer", self.infer, "inference"),
                ("POST", f"{prefix}/generate", self._generate.generate, "inference"),
                ("POST", f"{prefix}/generate_stream", self._generate.stream, "inference"),
            ]
        system, cuda = "/v2/systemsharedmemory", "/v2/cudasharedmemory"
        for base, status, register, unregister in (
            (system, admin.shm_status, admin.shm_register, admin.shm_unregister),
            (cuda, admin.cuda_shm_status, admin.cuda_shm_register, admin.cuda_shm_unregister),
        ):
            table += [
                ("GET", f"{base}/status", status, "shared-memory"),
                ("GET", f"{base}/region/{{region}}/status", status, "shared-memory"),
                ("POST", f"{base}/region/{{region}}/register", register, "shared-memory"),
                ("POST", f"{base}/unregister", unregister, "shared-memory"),
                ("POST", f"{base}/region/{{region}}/unregister", unregister, "shared-memory"),
            ]
        return table

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self._max_body_bytes, middlewares=[_errors])
        for method, path, handler, group in self.routes():
            rules = [rule for rule in self._restricted if group in rule.groups]
            app.router.add_route(method, path, _guarded(handler, rules) if rules else handler)
        return app

    async def start(self, host: str, port: int) -> int:
        """Serve on host:port (0 picks a free port); returns the port bound."""
        self._runner = web.AppRunner(self.application(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        return int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def live(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self._engine.ready() else 400)

    async def model_ready(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        ready = not self._engine.stopping and self._repository.is_ready(name, version)
        return web.Response(status=200 if ready else 400)

    async def server_metadata(self, request: web.Request) -> web.Response:
        serves_cuda = self._shared_memory.serves_cuda
        metadata = server_metadata(self._version, HTTP_EXTENSIONS, serves_cuda)
        return web.json_response(message_json(metadata))

    async def model_metadata(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        target = self._repository.get(name, version)
        # As Triton: a named version lists only itself, an empty one every ready version.
        versions = [target.version] if version else sorted(self._repository.entry(name).ready)
        return web.json_response(message_json(model_metadata(target, versions)))

    async def model_config(self, request: web.Request) -> web.Response:
        target = self._repository.get(*_model(request))
        return web.json_response(message_json(target.config))

    async def statistics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model", "")
        version = request.match_info.get("version", "")
        versions = statistics_targets(self._repository, name, version)
        answer = pb.ModelStatisticsResponse(model_stats=[model_statistics(v) for v in versions])
        return web.json_response(message_json(answer))

    async def repository_index(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        ready_only = body.get("ready", False) is True
        entries = index_entries(self._repository.index(), ready_only=ready_only)
        return web.json_response([message_json(entry) for entry in entries])

    async def load(self, request: web.Request) -> web.Response:
        if not self._model_control:
            raise ModelControlDisabledError()
        name = request.match_info["model"]
        override, files = load_parameters(load_request(name, parse_json(await request.read())))
        await self._repository.load(name, override, files)
        return web.Response(status=200)

    async def unload(self, request: web.Request) -> web.Response:
        if not self._model_control:
            raise ModelControlDisabledError()
        name = request.match_info["model"]
        parameters = parameters_of(parse_json(await request.read()), f"unload of model '{name}'")
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidInputError("unload parameter 'unload_dependents' must be a boolean")
        await self._repository.unload(name, unload_dependents=dependents)
        return web.Response(status=200)

    async def infer(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        body, binary = split_body(await request.read(), request.headers.get(HEADER_LENGTH))
        request_id = body.get("id", "")
        if not isinstance(request_id, str):
            raise InvalidInputError(f"request 'id' must be a string, got {request_id!r:.80}")
        outputs, binary_outputs = requested_outputs(body)
        locations = output_locations(body)
        response = await self._engine.infer(
            InferRequest(
                name,
                version,
                decode_inputs(body, binary, name, self._shared_memory),
                outputs,
                infer_options(body),
                request_id,
                trace_carrier(request.headers) if self._engine.tracing else None,
            )
        )
        data, header_length = encode_response(
            response, request_id, binary_outputs, locations, self._shared_memory
        )
        if header_length is None:
            return web.Response(body=data, content_type="application/json")
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )
