"""`submit`: one request handed to a version's scheduler and counted in that version's
statistics; `infer_on`: the same for a request built in the server (an ensemble's step, a
Python model's call to another model, which `model_caller` serves)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from backends import (
    BackendError,
    ModelCaller,
    ModelError,
    Outputs,
    on_host,
    response_parameters,
)
from batching import (
    BatchingError,
    DeadlineCancelledError,
    DeadlineExceededError,
    LatencyTargetError,
    QueueFullError,
    RequestResult,
    RequestTimeoutError,
    SequenceStep,
)
from server.contract.datatypes import wire_of
from server.contract.errors import InvalidInputError, ServerError, UnsupportedError
from server.contract.model_io import check_request
from server.contract.requests import InferInput, InferOptions, SequenceFlags, model_parameters
from server.core.cache import Lookup
from server.core.errors import model_error
from server.core.observability.stats import ModelStats
from server.core.serving.servable import Servable, Streamed

CACHE_INSTANCE = "response cache"  # the instance a cache hit names (traces: no compute)


async def submit(
    target: Servable,
    arrays: dict[str, npt.NDArray[Any]],
    batch_size: int,
    options: InferOptions,
) -> RequestResult:
    """Run one checked request on a version and count it, success or failure, by Triton's
    failure reasons; a request the version's response cache holds is answered from it."""
    cache, lookup = target.cache, None
    if cache is not None:
        lookup = await cache.lookup(arrays, options.parameters)
        if lookup is not None and lookup.outputs is not None:
            return _from_cache(target, lookup, batch_size)
    if target.prepare is not None:
        arrays = target.prepare(arrays)
    start_ns = time.monotonic_ns()
    try:
        result = await target.scheduler.infer(
            arrays,
            batch_size,
            options.priority,
            options.timeout_us * 1000,
            options.parameters,
            options.device_outputs,
            None if (flags := options.sequence) is None else _step(flags),
            deadline_ns=options.deadline_ns,
            share=options.share,
            in_turn=options.in_turn,
        )
    except (Exception, asyncio.CancelledError) as exc:
        count_failure(target.stats, exc, options, start_ns)
        raise
    if cache is not None and lookup is not None:
        target.stats.cache_miss.add(await cache.insert(lookup, result.outputs))
    target.stats.record_success(result, time.monotonic_ns() - start_ns)
    if target.reshape is not None:
        return msgspec.structs.replace(result, outputs=target.reshape.to_config(result.outputs))
    return result


def count_failure(
    stats: ModelStats, exc: BaseException, options: InferOptions, start_ns: int
) -> None:
    """Count a request that failed with `exc` under Triton's reasons: REJECTED (a full queue, a
    queue timeout, a latency target's refusal), CANCELED (its caller left, or its gRPC
    deadline passed), BACKEND (the model failed) or OTHER."""
    if isinstance(exc, QueueFullError | RequestTimeoutError):
        reason = "REJECTED"
    elif isinstance(exc, DeadlineExceededError):
        # Under Triton's reason: a request its gRPC deadline ended is CANCELED there, one its
        # `timeout` parameter ended is REJECTED (a queue timeout).
        stats.deadline_exceeded += 1
        deadline_ns, timeout_ns = options.deadline_ns, options.timeout_us * 1000
        by_caller = deadline_ns and (not timeout_ns or deadline_ns <= start_ns + timeout_ns)
        reason = "CANCELED" if by_caller else "REJECTED"
    elif isinstance(exc, DeadlineCancelledError):  # cancelled before the batcher's drop
        stats.deadline_exceeded += 1
        reason = "CANCELED"
    elif isinstance(exc, LatencyTargetError):
        stats.target_refused += 1
        reason = "REJECTED"
    elif isinstance(exc, asyncio.CancelledError | GeneratorExit):
        reason = "CANCELED"
    elif isinstance(exc, BackendError):
        reason = "BACKEND"
    else:
        reason = "OTHER"
    stats.record_failure(time.monotonic_ns() - start_ns, reason)


def _from_cache(target: Servable, lookup: Lookup, batch_size: int) -> RequestResult:
    """A hit: a success with no queue, compute or execution, as Triton counts one."""
    assert lookup.outputs is not None
    target.stats.record_cache_hit(lookup.lookup_ns, lookup.lookup_ns)
    outputs = lookup.outputs
    if target.reshape is not None:
        outputs = target.reshape.to_config(outputs)
    return RequestResult(outputs, 0, 0, 0, 0, max(batch_size, 1), CACHE_INSTANCE)


def _step(flags: SequenceFlags) -> SequenceStep:
    # The contract's sequence parameters as the batcher takes them (it never imports the
    # contract); field by field, not astuple, which deep-copies on every request.
    return SequenceStep(flags.id, flags.start, flags.end)


async def infer_on(
    target: Servable,
    arrays: Mapping[str, npt.NDArray[Any]],
    outputs: Sequence[str],
    options: InferOptions,
) -> RequestResult:
    """Check a request built in the server as a client's would be, then submit it. A
    decoupled version answers through its stream, and must send exactly one response (an
    ensemble's step takes one; UnsupportedError for any other count)."""
    checked, batch_size = check_request(target.io, _inputs(target, arrays), outputs)
    if target.router is None:
        return await submit(target, checked, batch_size, options)
    started_ns = time.monotonic_ns()
    answers: list[Mapping[str, Any]] = []
    async with contextlib.aclosing(_streamed(target, checked, batch_size, options)) as items:
        async for item in items:
            if item.error is not None:
                raise item.error
            if item.outputs is not None:
                answers.append(item.outputs)
    if len(answers) != 1:
        raise UnsupportedError(
            f"model '{target.name}' streams its responses and sent {len(answers)} responses to "
            "a request answered once (ModelInfer, HTTP infer or generate, or a Python model's "
            "exec() without decoupled=True): ask through a stream instead "
            "(ModelStreamInfer, generate_stream, exec(decoupled=True))"
        )
    # The model's own batcher counted its execution; the caller sees the whole wait as queue.
    waited_ns = time.monotonic_ns() - started_ns
    return RequestResult(answers[0], waited_ns, 0, 0, 0, max(batch_size, 1), target.name)


async def stream_on(
    target: Servable,
    arrays: Mapping[str, npt.NDArray[Any]],
    outputs: Sequence[str],
    options: InferOptions,
) -> AsyncGenerator[Streamed, None]:
    """Check a request built in the server as a client's would be, and yield each response of a
    version that streams them (`target.router`: a decoupled model, or an ensemble with such a
    step), its outputs in the config's dims (with the response parameters the model set)."""
    checked, batch_size = check_request(target.io, _inputs(target, arrays), outputs)
    async with contextlib.aclosing(_streamed(target, checked, batch_size, options)) as items:
        async for item in items:
            yield item


async def _streamed(
    target: Servable, checked: dict[str, npt.NDArray[Any]], batch_size: int, options: InferOptions
) -> AsyncGenerator[Streamed, None]:
    assert target.router is not None
    # Closing this stream closes the request's own at once (it ends the request).
    async with contextlib.aclosing(
        target.router.stream(target, checked, batch_size, options)
    ) as items:
        async for item in items:
            if item.outputs is not None and target.reshape is not None:
                answered = response_parameters(item.outputs)
                produced = target.reshape.to_config(item.outputs)
                produced = produced if answered is None else Outputs(produced, answered)
                item = replace(item, outputs=produced)
            yield item


def _inputs(target: Servable, arrays: Mapping[str, npt.NDArray[Any]]) -> list[InferInput]:
    """Arrays built in the server as the inputs a client would send."""
    specs = target.io.inputs
    return [
        InferInput(
            name,
            wire_of(array.dtype, specs[name].datatype if name in specs else None),
            tuple(array.shape),
            array,
        )
        for name, array in arrays.items()
    ]


def model_caller(resolve: Callable[[str, str], Servable]) -> ModelCaller:
    """A Python model's `InferenceRequest.exec`: a request to another model of this server
    (`resolve` finds its ready version), checked and counted as a client's; the requested
    outputs (all when none are named) come back in host memory, with the response parameters
    the called model set."""
    return _ModelCaller(resolve)


class _ModelCaller:
    """`model_caller`'s answer: one response (`__call__`) or a decoupled model's stream."""

    def __init__(self, resolve: Callable[[str, str], Servable]) -> None:
        self._resolve = resolve

    async def __call__(
        self,
        model: str,
        version: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        parameters: dict[str, Any],
    ) -> dict[str, Any]:
        try:
            options = _call_options(parameters)
            result = await infer_on(self._resolve(model, version), inputs, outputs, options)
        except (ServerError, BackendError, BatchingError) as exc:
            raise model_error(exc) from exc
        return _picked(result.outputs, outputs)

    async def stream(
        self,
        model: str,
        version: str,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        parameters: dict[str, Any],
    ) -> AsyncIterator[tuple[dict[str, Any] | None, ModelError | None, bool]]:
        """Each response of the request, as a decoupled model sends it (a model that is not
        decoupled sends one, final); cancelling the consumer cancels the request."""
        try:
            target = self._resolve(model, version)
            options = _call_options(parameters)
            if target.router is None:
                result = await infer_on(target, inputs, outputs, options)
                yield _picked(result.outputs, outputs), None, True
                return
            async with contextlib.aclosing(stream_on(target, inputs, outputs, options)) as items:
                async for item in items:
                    if item.error is not None:
                        yield None, model_error(item.error), item.final
                    elif item.outputs is None:
                        yield None, None, item.final
                    else:
                        yield _picked(item.outputs, outputs), None, item.final
        except (ServerError, BackendError, BatchingError) as exc:
            raise model_error(exc) from exc


def _call_options(parameters: dict[str, Any]) -> InferOptions:
    """A call's options: the sequence `InferenceRequest` names with its correlation id and flags
    (Triton's reserved `sequence_id`, `sequence_start` and `sequence_end` parameters), its
    `timeout` in microseconds, and the called model's own parameters."""
    sequence_id = parameters.get("sequence_id")
    sequence = None
    if sequence_id:
        if isinstance(sequence_id, bool) or not isinstance(sequence_id, int | str):
            raise InvalidInputError(
                f"a request's correlation_id must be an int or a str, not {sequence_id!r}"
            )
        if isinstance(sequence_id, int) and sequence_id < 0:
            raise InvalidInputError(f"'sequence_id' must be >= 0, got {sequence_id}")
        start, end = parameters.get("sequence_start"), parameters.get("sequence_end")
        sequence = SequenceFlags(sequence_id, bool(start), bool(end))
    timeout_us = parameters.get("timeout", 0)
    if isinstance(timeout_us, bool) or not isinstance(timeout_us, int) or timeout_us < 0:
        raise InvalidInputError(f"a request's timeout must be microseconds, not {timeout_us!r}")
    return InferOptions(
        timeout_us=timeout_us, parameters=model_parameters(parameters.items()), sequence=sequence
    )


def _picked(produced: Mapping[str, Any], outputs: list[str]) -> dict[str, Any]:
    """The requested outputs (all when none are named) in host memory, with the response's
    parameters."""
    arrays = {
        name: on_host(array) for name, array in produced.items() if not outputs or name in outputs
    }
    answered = response_parameters(produced)
    return arrays if answered is None else Outputs(arrays, answered)
