"""`HttpFrontEnd`: Triton's HTTP/REST v2 routes on `HttpServer`, in the server's event loop; thin:
JSON -> domain call -> JSON, the same calls the gRPC servicer makes. Routes of a protocol group
named by `--http-restricted-api` need its header."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from proto import message_json
from server.contract.core import Core
from server.contract.errors import (
    InvalidInputError,
    ModelControlDisabledError,
    RestrictedError,
    ServerError,
)
from server.contract.requests import InferOptions
from server.contract.settings import RestrictedProtocol, TraceSettings
from server.frontend.common import EXTENSIONS, load_parameters, server_metadata
from server.frontend.forwarding import HeaderForwarding
from server.frontend.http.admin import AdminRoutes, load_request
from server.frontend.http.codec import HEADER_LENGTH, parameters_of, parse_json, trace_carrier
from server.frontend.http.forward import answer, decode_request
from server.frontend.http.generate import GenerateRoutes
from server.frontend.http.messages import (
    Handler,
    Headers,
    Request,
    Response,
    Router,
    Streamed,
    json_response,
)
from server.frontend.http.status import http_status_for
from server.frontend.http.transport import HttpServer
from server.frontend.orca import header_format, report_headers
from server.frontend.serialized import SerializedInfer

# What GET /v2 advertises: the extensions this front end always implements (and CUDA shared
# memory where a GPU serves it).
HTTP_EXTENSIONS = (*EXTENSIONS, "binary_tensor_data")


def _errors(handler: Handler) -> Handler:
    """Domain errors answer `{"error": ...}` with their status (the server answers anything
    unexpected with 500)."""

    async def answer(request: Request) -> Response | Streamed:
        try:
            return await handler(request)
        except ServerError as exc:
            return json_response({"error": str(exc)}, status=http_status_for(exc))

    return answer


def _too_large(limit: int) -> str:
    # Triton's words (and its 400) for a body past --http-max-input-size.
    return (
        f"Request size exceeds the maximum allowed value of {limit} bytes. Use "
        "--http-max-input-size to increase the limit."
    )


def _model(request: Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


def _guarded(handler: Handler, rules: Sequence[RestrictedProtocol]) -> Handler:
    """The handler behind its group's headers; a missing or wrong one is 403, as Triton's."""

    async def guarded(request: Request) -> Response | Streamed:
        for rule in rules:
            if request.headers.get(rule.header) != rule.value:
                raise RestrictedError(f"This API is restricted, expecting header '{rule.header}'")
        return await handler(request)

    return guarded


class HttpFrontEnd:
    """Every route this server answers over HTTP; started and stopped by `App`."""

    def __init__(
        self,
        core: Core,
        version: str,
        model_control: bool,
        max_body_bytes: int,
        *,
        trace: TraceSettings | None = None,
        restricted: Sequence[RestrictedProtocol] = (),
        name: str = "convoy",
        forward_pattern: str | None = None,
        share_header: str | None = None,
        forward: SerializedInfer | None = None,
    ) -> None:
        self._core = core
        self._forward = forward  # a front-end worker's way to pass infer requests on as they came
        self._name = name  # what server metadata reports (Triton's --id)
        self._version = version
        self._forwarding = HeaderForwarding(forward_pattern, share_header)
        self._model_control = model_control  # explicit mode: load and unload are allowed
        self._max_body_bytes = max_body_bytes
        self._admin = AdminRoutes(core, trace or TraceSettings())
        self._generate = GenerateRoutes(core)
        self._restricted = tuple(restricted)
        self._server: HttpServer | None = None

    def routes(self) -> list[tuple[str, str, Handler, str]]:
        """(method, path, handler, protocol group) of every route, as Triton's URLs."""
        admin = self._admin
        table: list[tuple[str, str, Handler, str]] = [
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

    def router(self) -> Router:
        router = Router()
        for method, path, handler, group in self.routes():
            rules = [rule for rule in self._restricted if group in rule.groups]
            wrapped = _errors(_guarded(handler, rules) if rules else handler)
            router.add(method, path, wrapped, ends_with_client=group == "inference")
        return router

    async def start(
        self,
        host: str,
        port: int,
        reuse_port: bool = False,
        max_connection_age_s: float | None = None,
    ) -> int:
        """Serve on host:port (0 picks a free port); returns the port bound. With `reuse_port`,
        other processes may serve the same port (SO_REUSEPORT); `max_connection_age_s`: how
        long a connection lives before its next answer closes it (None: as long as the client
        keeps it)."""
        limit = self._max_body_bytes
        self._server = HttpServer(self.router(), limit, _too_large(limit), max_connection_age_s)
        return await self._server.start(host, port, reuse_port)

    def drain(self) -> None:
        """New connections are refused; each open one closes after its current answer."""
        if self._server is not None:
            self._server.drain()

    @property
    def answering(self) -> int:
        return 0 if self._server is None else self._server.answering

    async def stop(self, grace_s: float = 5.0) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)

    async def live(self, request: Request) -> Response:
        return Response()

    async def ready(self, request: Request) -> Response:
        return Response(200 if await self._core.server_ready() else 400)

    async def model_ready(self, request: Request) -> Response:
        name, version = _model(request)
        ready = await self._core.model_ready(name, version)
        return Response(200 if ready else 400)

    async def server_metadata(self, request: Request) -> Response:
        serves_cuda = self._core.info.cuda_shared_memory
        metadata = server_metadata(self._name, self._version, HTTP_EXTENSIONS, serves_cuda)
        return json_response(message_json(metadata))

    async def model_metadata(self, request: Request) -> Response:
        metadata = await self._core.model_metadata(*_model(request))
        return json_response(message_json(metadata))

    async def model_config(self, request: Request) -> Response:
        config = await self._core.model_config(*_model(request))
        return json_response(message_json(config))

    async def statistics(self, request: Request) -> Response:
        name = request.match_info.get("model", "")
        version = request.match_info.get("version", "")
        answer = await self._core.model_statistics(name, version)
        return json_response(message_json(answer))

    async def repository_index(self, request: Request) -> Response:
        body = parse_json(request.body)
        ready_only = body.get("ready", False) is True
        index = await self._core.repository_index(ready_only)
        return json_response([message_json(entry) for entry in index.models])

    async def load(self, request: Request) -> Response:
        if not self._model_control:
            raise ModelControlDisabledError()
        name = request.match_info["model"]
        override, files = load_parameters(load_request(name, parse_json(request.body)))
        await self._core.load_model(name, override, files)
        return Response()

    async def unload(self, request: Request) -> Response:
        if not self._model_control:
            raise ModelControlDisabledError()
        name = request.match_info["model"]
        parameters = parameters_of(parse_json(request.body), f"unload of model '{name}'")
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidInputError("unload parameter 'unload_dependents' must be a boolean")
        await self._core.unload_model(name, dependents)
        return Response()

    async def infer(self, request: Request) -> Response:
        name, version = _model(request)
        headers = request.headers
        form = header_format(headers)  # a balancer's load report
        tracing = self._core.info.tracing
        forward = self._forward
        if forward is not None and not tracing and not self._forwarding.active:
            answered = await forward.infer_http(
                name, version, request.body, headers.get(HEADER_LENGTH), form is not None
            )
        else:
            decoded, binary_outputs = decode_request(
                name,
                version,
                request.body,
                headers.get(HEADER_LENGTH),
                load_report=form is not None,
                adjust=self._forwarded_headers(headers) if self._forwarding.active else None,
                carrier=trace_carrier(headers) if tracing else None,
                traced_since_ns=time.monotonic_ns() if tracing else None,
            )
            answered = await answer(self._core, decoded, binary_outputs)
        extra = report_headers(answered.load, form)
        if answered.header_length is None:
            return Response(200, answered.data, "application/json", extra)
        extra = ((HEADER_LENGTH, str(answered.header_length)), *extra)
        return Response(200, answered.data, "application/octet-stream", extra)

    def _forwarded_headers(self, headers: Headers) -> Callable[[InferOptions], InferOptions]:
        return lambda options: self._forwarding.apply(options, headers.pairs)
