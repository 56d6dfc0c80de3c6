"""Decoupled models (0..N responses per request) behind the ordinary dynamic batcher.

The batcher still forms batches and picks instances; each batch runs through the instance's
`execute_decoupled`, whose responses the `DecoupledRouter` hands to the stream of the request
that asked for them. A request is known by a token that travels with it through the queue among
its parameters (under a reserved name no client parameter reaches a model with), not by the
identity of its tensors, which conversions before batching replace. Everything here runs on the
event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import msgspec
import numpy.typing as npt

from backends import (
    BackendError,
    ExecutionResult,
    Parameters,
    PythonInstance,
    Response,
    TensorMap,
)
from server.contract.requests import InferOptions
from server.core.serving.servable import Servable, Streamed
from server.core.serving.submit import submit

# The parameter that carries a request's token to the executor; `triton_` names are Triton's
# own, so a client's parameter of that name never reaches the queue.
_TOKEN = "triton_convoy_stream"


class DecoupledRouter:
    """Routes each batch's responses to the requests' own queues (keyed by their tokens)."""

    def __init__(self) -> None:
        self._sinks: dict[int, asyncio.Queue[Streamed]] = {}
        self._tokens = itertools.count(1)

    def executor(self, instance: PythonInstance) -> DecoupledExecutor:
        return DecoupledExecutor(instance, self)

    async def stream(
        self,
        target: Servable,
        arrays: dict[str, npt.NDArray[Any]],
        batch_size: int,
        options: InferOptions,
    ) -> AsyncGenerator[Streamed, None]:
        """Queue one request and yield its responses as the model sends them."""
        sink: asyncio.Queue[Streamed] = asyncio.Queue()
        token = next(self._tokens)
        self._sinks[token] = sink
        tagged = msgspec.structs.replace(options, parameters={**options.parameters, _TOKEN: token})
        running = asyncio.create_task(submit(target, arrays, batch_size, tagged))
        histograms, started_ns = target.stats.latency, time.monotonic_ns()
        taking: asyncio.Future[Streamed] | None = None
        try:
            while True:
                taking = asyncio.ensure_future(sink.get())
                await asyncio.wait({taking, running}, return_when=asyncio.FIRST_COMPLETED)
                if not taking.done():  # finished without a final response: it failed to run
                    taking.cancel()
                    if sink.empty():
                        if histograms is not None:  # its error is its first response
                            histograms.record_first_response(time.monotonic_ns() - started_ns)
                        await running  # raises the reason (queue full, timeout, closed ...)
                        return
                    taking = asyncio.ensure_future(sink.get())
                item = await taking
                if histograms is not None:
                    histograms.record_first_response(time.monotonic_ns() - started_ns)
                    histograms = None  # only the first
                yield item
                if item.final:
                    return
        finally:
            self._sinks.pop(token, None)
            for task in (taking, running):  # the consumer may have left while both waited
                if task is not None and not task.done():
                    task.cancel()

    def take(
        self, parameters: Sequence[Parameters]
    ) -> tuple[list[asyncio.Queue[Streamed] | None], list[Parameters], list[int | None]]:
        """The batch's sinks, by the tokens in its requests' parameters, the parameters without
        the tokens (what the model sees), and the tokens."""
        sinks = []
        own: list[Parameters] = []
        tokens: list[int | None] = []
        for values in parameters:
            token = values.get(_TOKEN)
            tokens.append(token if isinstance(token, int) else None)
            sinks.append(self._sinks.get(token) if isinstance(token, int) else None)
            own.append({key: value for key, value in values.items() if key != _TOKEN})
        return sinks, own, tokens

    def streaming(self, token: int | None) -> bool:
        """Whether the request of `token` still has its stream's consumer (it goes away when
        the client or a BLS caller cancels); read from the instance's thread too."""
        return token is not None and token in self._sinks


class DecoupledExecutor:
    """The batcher's executor for one decoupled instance."""

    def __init__(self, instance: PythonInstance, router: DecoupledRouter) -> None:
        self.instance = instance
        self._router = router

    @property
    def name(self) -> str:
        return self.instance.name

    @property
    def restarts(self) -> int:
        return self.instance.restarts

    async def execute(
        self,
        requests: Sequence[TensorMap],
        parameters: Sequence[Parameters] = (),
        device_outputs: bool = False,
    ) -> ExecutionResult:
        # Responses go to their streams in host memory, whatever `device_outputs` says. Every
        # request carries its token, so `parameters` holds one entry per request.
        sinks, own, tokens = self._router.take(parameters)
        router = self._router

        def cancelled(index: int) -> bool:  # a request's `is_cancelled()`
            return not router.streaming(tokens[index])

        def send(index: int, response: Response | None, final: bool) -> None:
            sink = sinks[index]
            if sink is None:
                return  # its caller went away; the response is dropped
            if isinstance(response, BackendError):
                sink.put_nowait(Streamed(None, response, final))
            else:
                sink.put_nowait(Streamed(response, None, final))

        # Each request's answer goes to its stream; the batcher gets one empty entry per
        # request, and the requests the model rescheduled.
        return await self.instance.execute_decoupled(requests, send, own, cancelled)
