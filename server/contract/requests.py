"""One inference request as a front end decoded it, whatever the wire protocol: its inputs,
the outputs asked for and its options (priority, timeout, the model's parameters)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from server.contract.errors import InvalidInputError

ParameterValue = bool | int | float | str  # one request parameter's value
Location = tuple[str, int, int]  # (region name, offset in bytes, byte size) of one tensor
Parameters = Mapping[str, ParameterValue]  # the parameters a model receives
SequenceId = int | str  # a sequence's correlation id (Triton's `sequence_id`); never 0 or ""


class SequenceFlags(msgspec.Struct, frozen=True):
    """A request's place in a sequence: Triton's `sequence_id`, `sequence_start` and
    `sequence_end` request parameters."""

    id: SequenceId
    start: bool = False
    end: bool = False


class InferOptions(msgspec.Struct, frozen=True):
    """A request's parameters: those the scheduler reads (Triton's reserved `priority`,
    `timeout` and sequence parameters) and the others, which go to the model (a Python
    model's `request.parameters()`); for a request built in the server, whether its outputs
    may stay in device memory."""

    priority: int = 0  # 0: the model's default priority level; 1 is the highest
    timeout_us: int = 0  # queue timeout; may only shorten the model's, and only if allowed
    parameters: Parameters = msgspec.field(default_factory=dict)
    device_outputs: bool = False  # an ensemble step whose consumers all compute on a device
    sequence: SequenceFlags | None = None  # None: the request names no sequence
    # When its caller stops waiting (time.monotonic_ns(), which every process of the server
    # shares): a gRPC deadline, or an ensemble's own for its steps; 0: none. The request is
    # never executed after it.
    deadline_ns: int = 0
    share: str = ""  # its fair-share class: the --fair-share-header value ("": none sent)
    # After a batch that waited out its delay, its answer leaves the batcher in turns of the
    # event loop, a few a turn (HTTP, whose writes are immediate: new requests are read
    # between a batch's answers).
    in_turn: bool = False


# Request parameters Triton keeps for itself (besides every `triton_...` one): never the model's.
RESERVED_PARAMETERS = frozenset(
    {
        "priority",
        "timeout",
        "binary_data_output",
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "headers",
    }
)


def model_parameters(items: Iterable[tuple[str, object]]) -> dict[str, ParameterValue]:
    """The request parameters that reach the model: all but the reserved ones, each a boolean,
    number or string."""
    chosen: dict[str, ParameterValue] = {}
    for key, value in items:
        if key in RESERVED_PARAMETERS or key.startswith("triton_"):
            continue
        if not isinstance(value, bool | int | float | str):
            raise InvalidInputError(
                f"request parameter '{key}' must be a boolean, number or string, got "
                f"{type(value).__name__}"
            )
        chosen[key] = value
    return chosen


@dataclass(frozen=True, slots=True)
class Received:
    """A traced request's stage in its front end: the handler began decoding it and had it
    decoded (`time.monotonic_ns()`: CLOCK_MONOTONIC, which every process of the server on one
    Linux machine shares, so a front-end worker's stamps compare with the core's)."""

    protocol: Literal["GRPC", "HTTP"]  # the front end, as Triton's event names begin
    start_ns: int
    end_ns: int  # >= start_ns


class InferRequest(msgspec.Struct, frozen=True):
    """One request as a front end decoded it, whatever the wire protocol."""

    model: str
    version: str  # "" serves the newest ready version
    inputs: Sequence[InferInput]
    outputs: Sequence[str]  # the outputs asked for; empty: all of them
    options: InferOptions
    request_id: str = ""
    carrier: Mapping[str, str] | None = None  # trace headers, when tracing is on
    # Outputs the core writes into a registered shared memory region instead of answering them.
    output_locations: Mapping[str, Location] = msgspec.field(default_factory=dict)
    # Outputs asked for as their top classes (the classification extension): name -> count.
    classification: Mapping[str, int] = msgspec.field(default_factory=dict)
    received: Received | None = None  # its front end's receive stage, when tracing is on
    load_report: bool = False  # a balancer asked for the model's load with the response


class InferInput(msgspec.Struct, frozen=True):
    """One input tensor as the client sent it, already decoded from the wire, or where in a
    registered shared memory region the core reads it."""

    name: str
    datatype: str  # wire name, e.g. "FP32"
    shape: tuple[int, ...]
    array: Any  # a NumPy array (a CuPy one for an input in a CUDA region); None: in `location`
    location: Location | None = None
