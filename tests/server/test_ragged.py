"""Ragged batching's plan: batch inputs of every kind, ragged inputs joined end to end, outputs
split by rows or scattered in their source's shapes, and the configs refused at load (Triton's
examples where its docs give them)."""

import numpy as np
import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import parse_config
from server.core.serving import RaggedPlan

RAGGED = """
name: "ragged"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true },
        { name: "MASK" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "DOUBLED"
                 source_input: "INPUT" } ]
%s
"""


def _plan(batch_inputs: str = "") -> RaggedPlan:
    plan = RaggedPlan.from_config(parse_config(RAGGED % batch_inputs, "inline"))
    assert plan is not None
    return plan


def _batch_input(kind: str, data_type: str = "TYPE_INT32") -> str:
    return (
        f'batch_input [ {{ kind: {kind} target_name: "B" data_type: {data_type} '
        'source_input: "INPUT" } ]'
    )


def _requests(*shapes: tuple[int, ...]) -> list[dict[str, np.ndarray]]:
    start = 0
    requests = []
    for shape in shapes:
        count = int(np.prod(shape))
        values = np.arange(start, start + count, dtype=np.float32).reshape(shape)
        requests.append({"INPUT": values, "MASK": np.full((shape[0], 2), start, np.int32)})
        start += count
    return requests


def test_ragged_inputs_join_end_to_end_with_triton_s_index() -> None:
    """Triton's example: requests [1, 3], [1, 4] and [1, 5] reach the model as INPUT [12] and a
    BATCH_ACCUMULATED_ELEMENT_COUNT of [3, 7, 12]."""
    plan = _plan(_batch_input("BATCH_ACCUMULATED_ELEMENT_COUNT", "TYPE_FP32"))
    batch = plan.assemble(_requests((1, 3), (1, 4), (1, 5)))
    assert batch["INPUT"].tolist() == list(range(12))
    assert batch["MASK"].shape == (3, 2)  # not ragged: joined along the batch axis
    assert batch["B"].dtype == np.float32 and batch["B"].tolist() == [3, 7, 12]


# Each kind over a batch-2 request [2, 3] and a batch-1 request [1, 2].
KIND_CASES = [
    ("BATCH_ELEMENT_COUNT", [6, 2]),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT", [6, 8]),
    ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 6, 8]),
    ("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", None),  # [6]: only its shape means anything
    ("BATCH_ITEM_SHAPE", [[3], [3], [2]]),
    ("BATCH_ITEM_SHAPE_FLATTEN", [3, 3, 2]),
]


def test_every_kind_of_tritons_is_covered() -> None:
    assert {kind for kind, _ in KIND_CASES} == set(mc.BatchInput.Kind.keys())


@pytest.mark.parametrize(("kind", "expected"), KIND_CASES)
def test_every_batch_input_kind(kind: str, expected: list[object] | None) -> None:
    made = _plan(_batch_input(kind)).assemble(_requests((2, 3), (1, 2)))["B"]
    assert made.dtype == np.int32
    if expected is None:
        assert made.shape == (6,)
    else:
        assert made.tolist() == expected


def test_outputs_split_by_rows_or_scattered_in_their_sources_shapes() -> None:
    plan = _plan()
    requests = _requests((1, 3), (2, 2))
    outputs = {"SUM": np.array([[3.0], [5.0], [9.0]]), "DOUBLED": np.arange(7.0) * 2}
    first, second = plan.split(outputs, requests)
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["SUM"].tolist() == [[3.0]] and second["SUM"].tolist() == [[5.0], [9.0]]
    assert first["DOUBLED"].tolist() == [[0.0, 2.0, 4.0]]
    assert second["DOUBLED"].tolist() == [[6.0, 8.0], [10.0, 12.0]]
    # An output that does not hold the batch fails every request of it, saying why.
    short = plan.split({"SUM": np.zeros((3, 1)), "DOUBLED": np.zeros(6)}, requests)
    assert all("does not hold the 7 elements of 'INPUT'" in str(error) for error in short)


def test_a_model_without_ragged_batching_has_no_plan() -> None:
    plain = RAGGED.replace(" allow_ragged_batch: true", "").split("batch_output")[0]
    assert RaggedPlan.from_config(parse_config(plain, "inline")) is None
    unbatched = RAGGED.replace("max_batch_size: 8", "max_batch_size: 0").split("batch_output")[0]
    assert RaggedPlan.from_config(parse_config(unbatched, "inline")) is None


@pytest.mark.parametrize(
    ("batch_inputs", "message"),
    [
        (_batch_input("BATCH_ELEMENT_COUNT", "TYPE_INT64"), "must be TYPE_INT32 or TYPE_FP32"),
        (
            _batch_input("BATCH_ELEMENT_COUNT").replace('"INPUT" }', '"NOPE" }'),
            "reads source_input 'NOPE', which is not an input",
        ),
        (
            _batch_input("BATCH_ELEMENT_COUNT").replace('"B"', '"MASK"'),
            "is also an input of the config",
        ),
        (
            _batch_input("BATCH_ELEMENT_COUNT").replace('"B"', '"B" target_name: "C"'),
            "must name one target_name and one source_input",
        ),
    ],
)
def test_batch_inputs_triton_refuses_are_refused(batch_inputs: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RaggedPlan.from_config(parse_config(RAGGED % batch_inputs, "inline"))
