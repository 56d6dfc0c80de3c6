"""`Engine`: the one call the front ends make per request, independent of the wire protocol."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import msgspec
import numpy.typing as npt

from backends import BackendError, response_parameters
from batching import InFlight, RequestResult
from server.contract.errors import (
    SERVER_STOPPING,
    ModelLoadFailedError,
    ModelNotFoundError,
    ModelNotReadyError,
    ServerStoppingError,
    UnsupportedError,
)
from server.contract.idle_poll import IdlePoll
from server.contract.load import LoadReport
from server.contract.model_io import check_request
from server.contract.requests import InferRequest
from server.contract.responses import InferOutput, InferResponse
from server.core.metrics.load import load_report
from server.core.observability.tracing import (
    RequestTracer,
    TracedRequest,
    receive_events,
    stages,
)
from server.core.repository import ModelVersion, Repository
from server.core.serving.classification import check_classification, classified
from server.core.serving.ensemble import EnsembleResult
from server.core.serving.servable import StreamRouter
from server.core.serving.submit import CACHE_INSTANCE, submit

# One item of a streaming model's responses: a response (None: a final flag alone) or the error
# of one, with whether it is the request's last.
Item = tuple[InferResponse | BackendError | None, bool]

_log = logging.getLogger(__name__)


class Engine:
    """Routes requests to model versions, tracks requests in flight, and refuses when stopping."""

    def __init__(
        self,
        repository: Repository,
        strict_readiness: bool = True,
        lazy_load_timeout_s: float | None = None,
        tracer: RequestTracer | None = None,
        *,
        cold_start_timeout_s: float = 30.0,
        idle_poll_us: int = 0,
    ) -> None:
        """`idle_poll_us`: how long the event loop polls after the last request in flight is
        answered (`IdlePoll`; 0: never)."""
        self.repository = repository
        self._tracer = tracer
        self._strict_readiness = strict_readiness
        self._lazy_load_timeout_s = lazy_load_timeout_s  # None: evicted models stay unloaded
        self._cold_start_timeout_s = cold_start_timeout_s  # a keep-alive unloaded model's load
        self._stopping = False
        poll = IdlePoll(idle_poll_us, self._busy) if idle_poll_us else None
        self._in_flight = InFlight(None if poll is None else poll.idle)

    def _busy(self) -> bool:
        return self._in_flight.count > 0

    @property
    def tracing(self) -> bool:
        """Whether requests may be traced (front ends then pass their trace headers)."""
        return self._tracer is not None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def ready(self) -> bool:
        if self._stopping:
            return False
        return self.repository.all_ready() if self._strict_readiness else True

    def stop_accepting(self) -> None:
        """From now on readiness is false and new requests get UNAVAILABLE."""
        self._stopping = True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait (bounded) for the requests in flight; True if all finished."""
        return await self._in_flight.wait_idle(timeout_s)

    async def infer(
        self, request: InferRequest, target: ModelVersion | None = None
    ) -> InferResponse:
        """Serve one request; its `carrier` holds its trace headers when tracing is on.
        `target`: its version, when the caller has looked it up already (None: look it up)."""
        if self._stopping:
            raise ServerStoppingError(SERVER_STOPPING)
        traced = self._tracer is not None and self._tracer.wants(request.carrier)
        if not traced and not _log.isEnabledFor(logging.DEBUG):
            # One coroutine frame fewer on every request than going through `_logged`.
            target, result = await self._run(request, target)
            return self._reported(request, _response(target, result.outputs, request))
        return self._reported(request, await self._logged(request, target, traced))

    def _reported(self, request: InferRequest, response: InferResponse) -> InferResponse:
        """`response`, with the model's load when the request asked for it."""
        if request.load_report:
            return msgspec.structs.replace(response, load=self._load_report(response))
        return response

    def _load_report(self, response: InferResponse) -> LoadReport | None:
        """The answering version's load now (None: it was unloaded meanwhile)."""
        try:
            version = self.repository.get(response.model, str(response.version))
        except (ModelNotFoundError, ModelNotReadyError):
            return None
        versions = [v for entry in self.repository.entries() for v in entry.ready.values()]
        return load_report(version, versions)

    async def _logged(
        self, request: InferRequest, target: ModelVersion | None, traced: bool
    ) -> InferResponse:
        """`infer`, logged at debug level and traced when `traced`."""
        wall_offset_ns = time.time_ns() - time.monotonic_ns()
        arrived_ns = time.monotonic_ns()
        try:
            target, result = await self._run(request, target)
        except BaseException as exc:  # logged and traced, then raised as it is
            done_ns = time.monotonic_ns()
            _log.debug(
                "request model=%s version=%s id=%s status=%s duration_us=%d error=%r",
                request.model,
                request.version or "-",
                request.request_id,
                type(exc).__name__,
                (done_ns - arrived_ns) // 1000,
                str(exc),
            )
            if traced and self._tracer is not None:
                # Only its arrival and end are known: how far it got is not recorded.
                self._tracer.record(
                    TracedRequest(
                        request.model,
                        0,
                        request.request_id,
                        arrived_ns + wall_offset_ns,
                        done_ns + wall_offset_ns,
                        error=str(exc),
                        received=receive_events(request.received, wall_offset_ns),
                    ),
                    request.carrier,
                )
            raise
        done_ns = time.monotonic_ns()
        compute_ns = result.compute_input_ns + result.compute_infer_ns + result.compute_output_ns
        _log.debug(
            "request model=%s version=%d id=%s status=OK duration_us=%d queue_us=%d "
            "compute_us=%d batch_size=%d instance=%s",
            request.model,
            target.version,
            request.request_id,
            (done_ns - arrived_ns) // 1000,
            result.queue_ns // 1000,
            compute_ns // 1000,
            result.batch_size,
            result.instance,
        )
        if traced and self._tracer is not None:
            span_ns = (arrived_ns + wall_offset_ns, done_ns + wall_offset_ns)
            traced_request = _traced(
                request.model,
                target.version,
                request.request_id,
                result,
                span_ns=span_ns,
                wall_offset_ns=wall_offset_ns,
            )
            received = receive_events(request.received, wall_offset_ns)
            self._tracer.record(replace(traced_request, received=received), request.carrier)
        return _response(target, result.outputs, request)

    async def _run(
        self, request: InferRequest, target: ModelVersion | None
    ) -> tuple[ModelVersion, RequestResult]:
        if target is None:
            target = self._ready(request.model, request.version) or await self._reloaded(
                request.model, request.version
            )
        # A decoupled version always has a router; most have none, and skip the config's fields.
        if target.router is not None and target.config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        arrays, batch_size = check_request(target.io, request.inputs, request.outputs)
        if request.classification:
            check_classification(target.io, request.classification)
        with self._in_flight.counted():
            result = await submit(target, arrays, batch_size, request.options)
        return target, result

    async def infer_streamed(self, request: InferRequest) -> InferResponse | AsyncIterator[Item]:
        """Serve one request of a stream. A model that answers each request once: its response,
        as `infer` gives it (no iterator to build and step through per request). A streaming
        (decoupled) model: its responses, each (None: a final flag alone) with whether it is
        the last, once the request has passed its checks."""
        if self._stopping:
            raise ServerStoppingError(SERVER_STOPPING)
        target = self._ready(request.model, request.version) or await self._reloaded(
            request.model, request.version
        )
        if target.router is None:
            return await self.infer(request, target)
        arrays, batch_size = check_request(target.io, request.inputs, request.outputs)
        if request.classification:
            check_classification(target.io, request.classification)
        return self._streamed(request, target, target.router, arrays, batch_size)

    async def _streamed(
        self,
        request: InferRequest,
        target: ModelVersion,
        router: StreamRouter,
        arrays: dict[str, npt.NDArray[Any]],
        batch_size: int,
    ) -> AsyncIterator[Item]:
        # Closing this stream closes the request's own at once (it ends the request).
        with self._in_flight.counted():
            async with contextlib.aclosing(
                router.stream(target, arrays, batch_size, request.options)
            ) as stream:
                async for item in stream:
                    if item.error is not None:
                        yield item.error, item.final
                    elif item.outputs is None:
                        yield None, item.final
                    else:
                        produced = item.outputs
                        if target.reshape is not None:
                            produced = target.reshape.to_config(produced)
                        response = _response(target, produced, request)
                        yield self._reported(request, response), item.final

    def _ready(self, model: str, version: str) -> ModelVersion | None:
        """The version when it is ready (on every request, without a coroutine); None when its
        model was unloaded and a request loads it again (`_reloaded`)."""
        try:
            return self.repository.get(model, version)
        except ModelNotReadyError:
            if self._reload_timeout_s(model) is None:
                raise
        return None

    async def _reloaded(self, model: str, version: str) -> ModelVersion:
        """The version once its unloaded model has loaded again, bounded by the reload's
        timeout; called right after `_ready` found that it waits for one."""
        timeout_s = self._reload_timeout_s(model)
        assert timeout_s is not None  # nothing ran since `_ready` saw it
        why = "was unloaded after idling" if self.repository.was_idle(model) else "was evicted"
        try:
            # Requests that arrive during the load share it (and its end) through the repository.
            await asyncio.wait_for(self.repository.ensure_loaded(model), timeout_s)
        except TimeoutError:
            raise ModelNotReadyError(
                f"model '{model}' {why} and did not load again within {timeout_s:g} s"
            ) from None
        except ModelLoadFailedError as exc:
            raise ModelNotReadyError(f"model '{model}' {why} and failed to load: {exc}") from exc
        return self.repository.get(model, version)

    def _reload_timeout_s(self, model: str) -> float | None:
        """How long a request waits for its unloaded model to load again (None: it does not)."""
        if self.repository.was_idle(model):
            return self._cold_start_timeout_s
        if self._lazy_load_timeout_s is not None and self.repository.is_evicted(model):
            return self._lazy_load_timeout_s
        return None


def _traced(
    model: str,
    version: int,
    request_id: str,
    result: RequestResult,
    *,
    span_ns: tuple[int, int],
    wall_offset_ns: int,
) -> TracedRequest:
    """A finished request's spans (`span_ns`: its wall-clock start and end): its queue and
    compute laid back from its end by the durations it recorded, or, for an ensemble, one span
    per step."""
    start_ns, end_ns = span_ns
    if isinstance(result, EnsembleResult):
        steps = tuple(
            _traced(
                step.model,
                step.version,
                request_id,
                step.result,
                span_ns=(step.start_ns + wall_offset_ns, step.end_ns + wall_offset_ns),
                wall_offset_ns=wall_offset_ns,
            )
            for step in result.steps
        )
        # An ensemble has no queue of its own: its scheduler takes it up at its first step.
        queue_start_ns = min((step.start_ns for step in steps), default=None)
        return TracedRequest(
            model, version, request_id, start_ns, end_ns, queue_start_ns, steps=steps
        )
    if result.instance == CACHE_INSTANCE:  # answered by the cache: neither queued nor executed
        return TracedRequest(model, version, request_id, start_ns, end_ns)
    compute_ns = (result.compute_input_ns, result.compute_infer_ns, result.compute_output_ns)
    queue_start_ns, compute = stages(span_ns, result.queue_ns, compute_ns)
    return TracedRequest(
        model,
        version,
        request_id,
        start_ns,
        end_ns,
        queue_start_ns,
        compute,
        result.batch_size,
        result.instance,
    )


def _response(target: ModelVersion, produced: Any, request: InferRequest) -> InferResponse:
    specs = target.io.outputs
    outputs = []
    for name in request.outputs or specs:
        array = produced[name]
        outputs.append(InferOutput(specs[name], array.shape, array))
    if request.classification:
        batched = target.io.max_batch_size > 0
        outputs = classified(outputs, request.classification, target.labels, batched)
    return InferResponse(target.name, target.version, outputs, response_parameters(produced))
