"""How a torch_aoti package's call spec meets the config: dict keys by name, positional tensors by
`NAME__<index>` or config order, and the load errors when they do not meet."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import text_format

from backends import ModelLoadError
from backends.pytorch import plan_aoti_io
from proto import model_config_pb2 as mc
from tests.extras import require_extra

torch = require_extra("torch", "pytorch")
pytree = torch.utils._pytree


def _spec(structure: Any) -> str:
    """A package's serialized call spec side for `structure` (tensors as the leaves)."""
    _, spec = pytree.tree_flatten(structure)
    return str(pytree.treespec_dumps(spec))


def _config(inputs: list[str], outputs: list[str]) -> mc.ModelConfig:
    def tensors(names: list[str]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}' for n in names)

    text = (
        f'name: "m"\nplatform: "torch_aoti"\ninput [ {tensors(inputs)} ]\n'
        f"output [ {tensors(outputs)} ]\n"
    )
    return text_format.Parse(text, mc.ModelConfig())


T = torch.zeros(1)


def test_positional_tensors_follow_config_order_or_their_index() -> None:
    ins, outs = _spec(((T, T), {})), _spec((T, T))
    io = plan_aoti_io(_config(["b", "a"], ["y", "x"]), ins, outs)
    assert io.inputs == (("b", 0), ("a", 1)) and io.outputs == (("y", 0), ("x", 1))
    io = plan_aoti_io(_config(["IN__1", "IN__0"], ["OUT__1", "OUT__0"]), ins, outs)
    assert io.inputs == (("IN__0", 0), ("IN__1", 1))
    assert io.outputs == (("OUT__0", 0), ("OUT__1", 1))


def test_dict_inputs_and_outputs_go_by_key() -> None:
    ins = _spec(((), {"B": T, "A": T}))  # keyword arguments
    outs = _spec({"sum": T, "product": T})
    io = plan_aoti_io(_config(["A", "B"], ["product", "sum"]), ins, outs)
    assert dict(io.inputs) == {"B": 0, "A": 1}
    assert dict(io.outputs) == {"sum": 0, "product": 1}


def test_mismatches_are_load_errors() -> None:
    ins, outs = _spec(((T, T), {})), _spec((T,))
    with pytest.raises(ModelLoadError, match="declares 1 inputs, but the torch_aoti package has 2"):
        plan_aoti_io(_config(["a"], ["y"]), ins, outs)
    keyed = _spec(((), {"A": T}))
    with pytest.raises(ModelLoadError, match="input 'Z' is not in the torch_aoti package"):
        plan_aoti_io(_config(["Z"], ["y"]), keyed, outs)
