"""Which config tensor is which argument of `forward` and which element of its result, by the
naming conventions of Triton's PyTorch backend. Pure: the caller reads the schema from the file.

Inputs are matched by `forward` argument name when every config input is one; else by
`<name>__<index>` when every config input follows it; else by their order in the config. A
`forward` taking one `Dict[str, Tensor]` gets the inputs by their config names. Outputs are the
elements of the returned tuple (or the one tensor), by `<name>__<index>` or by config order.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from backends.config import is_digits
from backends.errors import ModelLoadError

_log = logging.getLogger(__name__)
_DELIMITER = "__"


class Naming(enum.Enum):
    """How config names find their position (Triton's NamingConvention)."""

    FORWARD_ARGUMENT = "forward argument"
    NAMED_INDEX = "<name>__<index>"
    CONFIG_ORDER = "config order"


@dataclass(frozen=True, slots=True)
class ForwardArgument:
    """One argument of `forward` after `self`, as its schema states it."""

    name: str
    kind: str  # the TorchScript type kind: "TensorType", "DictType", "ListType", ...
    type_name: str  # e.g. "Tensor", "Dict[str, Tensor]", for messages


@dataclass(frozen=True, slots=True)
class TorchIO:
    """Where each config tensor goes into `forward` and comes out of its result."""

    input_positions: dict[str, int]  # input name -> argument index; empty with a dict input
    dict_input: bool  # forward takes one Dict[str, Tensor] keyed by the config input names
    output_positions: dict[str, int]  # output name -> index in the returned tuple
    input_naming: Naming
    output_naming: Naming

    @property
    def argument_count(self) -> int:
        return 1 if self.dict_input else len(self.input_positions)


def plan_io(
    model: str,
    arguments: Sequence[ForwardArgument],
    inputs: Sequence[str],
    outputs: Sequence[str],
) -> TorchIO:
    """Match `inputs` (the config's, then sequence controls and states) and `outputs` (the
    config's, then state outputs) to `forward`; load errors in Triton's words where it has them."""
    if not inputs:
        raise ModelLoadError(
            f"model '{model}': model configuration must contain at least one input, none were "
            "specified (a TorchScript file records no data types or shapes, so the config "
            "declares every input and output)"
        )
    if not outputs:
        raise ModelLoadError(
            f"model '{model}': model configuration must contain at least one output, none were "
            "specified (a TorchScript file records no data types or shapes, so the config "
            "declares every input and output)"
        )
    output_naming = _naming(outputs, ())
    output_positions = _positions(outputs, (), output_naming)
    _check_unique(model, "output", output_positions)
    if len(arguments) == 1 and arguments[0].kind == "DictType":
        return TorchIO({}, True, output_positions, Naming.FORWARD_ARGUMENT, output_naming)
    for argument in arguments:
        if argument.kind == "DictType":
            raise ModelLoadError(
                f"model '{model}': Multiple inputs of kind DictType were detected. Only a single "
                "input of type Dict(str, Tensor) is supported."
            )
        if argument.kind not in ("TensorType", "ListType"):
            raise ModelLoadError(
                f"model '{model}': An input of type '{argument.type_name}' was detected in the "
                "model. Only a single input of type Dict(str, Tensor) or input(s) of type Tensor "
                "are supported."
            )
    if len(arguments) != len(inputs):
        raise ModelLoadError(
            f"unable to load model '{model}', configuration expects {len(inputs)} inputs, "
            f"model provides {len(arguments)}"
        )
    names = [argument.name for argument in arguments]
    input_naming = _naming(inputs, names)
    if input_naming is Naming.CONFIG_ORDER:
        _log.warning(
            "model '%s': inputs %s are neither forward arguments %s nor follow the "
            "<name>__<index> naming convention; they go to forward in config order",
            model,
            list(inputs),
            names,
        )
    positions = _positions(inputs, names, input_naming)
    _check_unique(model, "input", positions)
    for name, index in positions.items():
        if index >= len(arguments):
            raise ModelLoadError(
                f"model '{model}': input '{name}' names argument {index} of forward, which takes "
                f"{len(arguments)} ({names})"
            )
    return TorchIO(positions, False, output_positions, input_naming, output_naming)


def _naming(names: Sequence[str], arguments: Sequence[str]) -> Naming:
    if arguments and all(name in arguments for name in names):
        return Naming.FORWARD_ARGUMENT
    if all(_index(name) is not None for name in names):
        return Naming.NAMED_INDEX
    return Naming.CONFIG_ORDER


def _positions(names: Sequence[str], arguments: Sequence[str], naming: Naming) -> dict[str, int]:
    if naming is Naming.FORWARD_ARGUMENT:
        return {name: list(arguments).index(name) for name in names}
    if naming is Naming.NAMED_INDEX:
        return {name: _index(name) or 0 for name in names}
    return {name: position for position, name in enumerate(names)}


def _index(name: str) -> int | None:
    """The index of `<name>__<index>` (after the first `__`, digits only), else None."""
    _head, found, tail = name.partition(_DELIMITER)
    if not found or not is_digits(tail):
        return None
    return int(tail)


def _check_unique(model: str, side: str, positions: dict[str, int]) -> None:
    seen: dict[int, str] = {}
    for name, index in positions.items():
        if index in seen:
            raise ModelLoadError(
                f"model '{model}': {side}s '{seen[index]}' and '{name}' both name position "
                f"{index} of the model's {side}s"
            )
        seen[index] = name


def named_index_only(model: str, names: Sequence[str], what: str) -> None:
    """Sequence controls and states must follow `<name>__<index>` (Triton's rule)."""
    for name in names:
        if _index(name) is None:
            raise ModelLoadError(
                f"model '{model}': {what} '{name}' does not follow <name>__<index> naming "
                "convention."
            )
