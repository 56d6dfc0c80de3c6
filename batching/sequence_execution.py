"""One sequence batch on its instance: each request's feed (controls and state added), the
execution, each request's answer and kept state, and afterwards the slots of the sequences it
ended freed (`batching.sequence` chooses and dispatches the batches)."""

from __future__ import annotations

import logging
import time

from batching.alarm import Alarm
from batching.execution import Observer, checked, settle
from batching.limiter import ExecutionGate
from batching.messages import (
    NO_PARAMETERS,
    ExecutionRecord,
    Parameters,
    RequestResult,
    TensorMap,
)
from batching.sequence_slots import Lane, OpenSequence, SequenceRequest, SequenceSlots, mark
from batching.sequence_tensors import keep_state, null_feed, request_feed, step_parameters

_log = logging.getLogger(__name__)


async def execute_batch(
    lane: Lane,
    batch: list[tuple[OpenSequence, SequenceRequest] | None],
    slots: SequenceSlots,
    observer: Observer | None,
    gate: ExecutionGate | None,
    wake: Alarm,
) -> None:
    """Run `batch` (a request per batch position; None: a null request) on `lane`'s instance,
    answer its requests, free the slots of the sequences it ended, and wake the loop."""
    start_ns = time.monotonic_ns()
    real = [entry for entry in batch if entry is not None]
    template = real[0][1].inputs
    policy = slots.policy
    feeds: list[TensorMap] = []
    parameters: list[Parameters] = []
    for entry in batch:
        if entry is None:
            feeds.append(null_feed(policy, template))
            parameters.append(NO_PARAMETERS)
            continue
        sequence, request = entry
        corrid, start, end = sequence.correlation_id, request.start, request.end
        feeds.append(request_feed(policy, request.inputs, corrid, start, end, sequence.state))
        parameters.append(step_parameters(request.parameters, corrid, start, end))
    record = ExecutionRecord(len(real), len(real), 0, 0, 0, succeeded=False)
    again: set[int] = set()  # id() of the requests the model rescheduled
    try:
        try:
            executor = lane.executor
            outcome = checked(
                await executor.execute(feeds, parameters, False), executor, len(batch)
            )
        except Exception as exc:  # the loop never dies: fail only this batch
            _log.warning("model '%s': sequence batch failed: %s", policy.model, exc)
            _report(observer, record)
            for _, request in real:
                settle(request.future, exc)
            return
        record = ExecutionRecord(
            len(real),
            len(real),
            outcome.compute_input_ns,
            outcome.compute_infer_ns,
            outcome.compute_output_ns,
            succeeded=True,
        )
        _report(observer, record)
        rescheduled = outcome.rescheduled if policy.iterative else frozenset()
        for index, (entry, response) in enumerate(zip(batch, outcome.responses, strict=True)):
            if entry is None:
                continue
            sequence, request = entry
            spent = request.spent_ns
            spent[0] += start_ns - request.ready_ns
            spent[1] += outcome.compute_input_ns
            spent[2] += outcome.compute_infer_ns
            spent[3] += outcome.compute_output_ns
            if index in rescheduled:
                again.add(id(request))
                continue
            if isinstance(response, Exception):
                settle(request.future, response)
                continue
            outputs = keep_state(policy, sequence.state, response)
            settle(
                request.future,
                RequestResult(
                    outputs=outputs,
                    queue_ns=spent[0],
                    compute_input_ns=spent[1],
                    compute_infer_ns=spent[2],
                    compute_output_ns=spent[3],
                    batch_size=record.batch_size,
                    instance=lane.executor.name,
                ),
            )
    finally:
        done_ns = time.monotonic_ns()
        for sequence, request in real:
            sequence.running = False
            sequence.last_ns = done_ns
            if id(request) in again and not request.future.done():
                # Runs again, as its sequence's next request: no longer its START.
                request.start = False
                request.ready_ns = done_ns
                continue
            if sequence.requests and sequence.requests[0] is request:
                sequence.requests.popleft()
            if (request.end or policy.iterative) and not sequence.requests:
                slots.release(sequence)
        lane.busy = False
        if gate is not None:
            more = any(mark(sequence) is not None for sequence in lane.slots)
            gate.release(lane.executor, again=more)
        wake.set()


def _report(observer: Observer | None, record: ExecutionRecord) -> None:
    if observer is not None:
        observer(record)
