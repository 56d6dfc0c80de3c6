"""`HttpFrontEnd`: Triton's HTTP/REST v2 routes on aiohttp, in the server's event loop; thin:
JSON -> domain call -> JSON, the same calls the gRPC servicer makes."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from backends import BackendError
from batching import BatchingError
from proto import grpc_service_pb2 as pb
from server.engine import Engine
from server.errors import InvalidInputError, ModelControlDisabledError, ServerError
from server.http.codec import (
    HEADER_LENGTH,
    decode_inputs,
    encode_response,
    infer_options,
    load_request,
    parse_json,
    requested_outputs,
    split_body,
)
from server.http.messages import message_json
from server.http.status import http_status_for
from server.messages import (
    index_entries,
    load_parameters,
    model_metadata,
    model_statistics,
    statistics_targets,
)
from server.tracing import TRACE_HEADERS

_log = logging.getLogger(__name__)

# What GET /v2 advertises: the extensions this front end implements.
HTTP_EXTENSIONS = (
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "parameters",
    "statistics",
    "binary_tensor_data",
)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(value).encode("utf-8"), status=status, content_type="application/json"
    )


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Domain errors answer `{"error": ...}` with their status; anything unexpected is 500."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (ServerError, BackendError, BatchingError) as exc:
        return _json({"error": str(exc)}, http_status_for(exc))
    except Exception as exc:
        _log.exception("%s %s failed unexpectedly", request.method, request.path)
        return _json({"error": f"internal error: {exc}"}, 500)


def _model(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


class HttpFrontEnd:
    """Every route this server answers over HTTP; started and stopped by `App`."""

    def __init__(
        self, engine: Engine, version: str, model_control: bool, max_body_bytes: int
    ) -> None:
        self._engine = engine
        self._repository = engine.repository
        self._version = version
        self._model_control = model_control  # explicit mode: load and unload are allowed
        self._max_body_bytes = max_body_bytes
        self._runner: web.AppRunner | None = None

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self._max_body_bytes, middlewares=[_errors])
        model = "/v2/models/{model}"
        versioned = "/v2/models/{model}/versions/{version}"
        app.router.add_get("/v2/health/live", self.live)
        app.router.add_get("/v2/health/ready", self.ready)
        app.router.add_get("/v2", self.server_metadata)
        app.router.add_get("/v2/models/stats", self.statistics)
        app.router.add_post("/v2/repository/index", self.repository_index)
        app.router.add_post("/v2/repository/models/{model}/load", self.load)
        app.router.add_post("/v2/repository/models/{model}/unload", self.unload)
        for prefix in (model, versioned):
            app.router.add_get(prefix, self.model_metadata)
            app.router.add_get(f"{prefix}/ready", self.model_ready)
            app.router.add_get(f"{prefix}/config", self.model_config)
            app.router.add_get(f"{prefix}/stats", self.statistics)
            app.router.add_post(f"{prefix}/infer", self.infer)
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
        return _json(
            {"name": "convoy", "version": self._version, "extensions": list(HTTP_EXTENSIONS)}
        )

    async def model_metadata(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        target = self._repository.get(name, version)
        # As Triton: a named version lists only itself, an empty one every ready version.
        versions = [target.version] if version else sorted(self._repository.entry(name).ready)
        return _json(message_json(model_metadata(target, versions)))

    async def model_config(self, request: web.Request) -> web.Response:
        target = self._repository.get(*_model(request))
        return _json(message_json(target.config))

    async def statistics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("model", "")
        version = request.match_info.get("version", "")
        versions = statistics_targets(self._repository, name, version)
        answer = pb.ModelStatisticsResponse(model_stats=[model_statistics(v) for v in versions])
        return _json(message_json(answer))

    async def repository_index(self, request: web.Request) -> web.Response:
        body = parse_json(await request.read())
        ready_only = body.get("ready", False) is True
        entries = index_entries(self._repository.index(), ready_only=ready_only)
        return _json([message_json(entry) for entry in entries])

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
        await self._repository.unload(request.match_info["model"])
        return web.Response(status=200)

    async def infer(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        body, binary = split_body(await request.read(), request.headers.get(HEADER_LENGTH))
        request_id = body.get("id", "")
        if not isinstance(request_id, str):
            raise InvalidInputError(f"request 'id' must be a string, got {request_id!r:.80}")
        outputs, binary_outputs = requested_outputs(body)
        carrier = (
            {key: request.headers[key] for key in TRACE_HEADERS if key in request.headers}
            if self._engine.tracing
            else None
        )
        response = await self._engine.infer(
            name,
            version,
            decode_inputs(body, binary, name),
            outputs,
            infer_options(body),
            request_id,
            carrier,
        )
        data, header_length = encode_response(response, request_id, binary_outputs)
        if header_length is None:
            return web.Response(body=data, content_type="application/json")
        return web.Response(
            body=data,
            content_type="application/octet-stream",
            headers={HEADER_LENGTH: str(header_length)},
        )
