"""Triton's PyTorch naming conventions as a pure plan: forward argument names, <name>__<index>,
config order, one Dict[str, Tensor] input, and the refusals in Triton's words."""

from __future__ import annotations

import pytest

from backends import ModelLoadError
from backends.pytorch import ForwardArgument, Naming, plan_io

X = ForwardArgument("x", "TensorType", "Tensor")
Y = ForwardArgument("y", "TensorType", "Tensor")


def test_forward_argument_names_win() -> None:
    io = plan_io("m", [X, Y], ["y", "x"], ["out"])
    assert io.input_naming is Naming.FORWARD_ARGUMENT
    assert io.input_positions == {"y": 1, "x": 0}
    assert io.output_positions == {"out": 0}


def test_named_index_on_both_sides() -> None:
    io = plan_io("m", [X, Y], ["INPUT__1", "INPUT__0"], ["OUTPUT__1", "OUTPUT__0"])
    assert io.input_naming is Naming.NAMED_INDEX and io.output_naming is Naming.NAMED_INDEX
    assert io.input_positions == {"INPUT__1": 1, "INPUT__0": 0}
    assert io.output_positions == {"OUTPUT__1": 1, "OUTPUT__0": 0}


def test_config_order_otherwise() -> None:
    io = plan_io("m", [X, Y], ["A", "B__x"], ["P", "Q"])
    assert io.input_naming is Naming.CONFIG_ORDER and io.output_naming is Naming.CONFIG_ORDER
    assert io.input_positions == {"A": 0, "B__x": 1}
    assert io.output_positions == {"P": 0, "Q": 1}


def test_one_dict_argument_takes_every_input_by_name() -> None:
    inputs = ForwardArgument("inputs", "DictType", "Dict[str, Tensor]")
    io = plan_io("m", [inputs], ["A", "B", "C"], ["OUT"])
    assert io.dict_input and io.argument_count == 1 and io.input_positions == {}


@pytest.mark.parametrize(
    ("arguments", "inputs", "outputs", "message"),
    [
        ([X, Y], ["x", "y", "z"], ["o"], "configuration expects 3 inputs, model provides 2"),
        ([X], [], ["o"], "must contain at least one input, none were specified"),
        ([X], ["x"], [], "must contain at least one output, none were specified"),
        (
            [X, ForwardArgument("d", "DictType", "Dict[str, Tensor]")],
            ["x", "d"],
            ["o"],
            "Multiple inputs of kind DictType were detected",
        ),
        (
            [ForwardArgument("n", "IntType", "int")],
            ["n"],
            ["o"],
            "An input of type 'int' was detected in the model",
        ),
        ([X, Y], ["A__0", "B__5"], ["o"], "input 'B__5' names argument 5 of forward"),
        ([X, Y], ["A__0", "B__0"], ["o"], "inputs 'A__0' and 'B__0' both name position 0"),
    ],
)
def test_refusals(
    arguments: list[ForwardArgument], inputs: list[str], outputs: list[str], message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        plan_io("m", arguments, inputs, outputs)
