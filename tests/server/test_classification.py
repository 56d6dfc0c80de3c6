"""The classification extension's pure part: top-k strings as Triton formats them, per batch
entry or over the whole output, labels, and the types that have no class result."""

import numpy as np
import pytest

from server.contract.datatypes import BY_WIRE
from server.contract.errors import InvalidInputError
from server.contract.model_io import ModelIO, TensorSpec
from server.contract.responses import InferOutput
from server.core.serving.classification import check_classification, classified, classify


def _strings(array: np.ndarray) -> list[object]:
    return np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(array).tolist()


def test_each_batch_entry_gets_its_own_top_classes_highest_first() -> None:
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]], np.float32)
    classes = classify(scores, 2, ("cat", "dog", "eel"), batched=True)
    assert classes.shape == (2, 2)
    assert _strings(classes) == [
        ["0.700000:1:dog", "0.200000:2:eel"],
        ["0.500000:0:cat", "0.250000:1:dog"],  # equal values: the lower index first
    ]


def test_a_non_batching_output_is_ranked_whole_and_flattened() -> None:
    scores = np.array([[1.0, 6.0, 2.0], [5.0, 3.0, 4.0]], np.float64)
    classes = classify(scores, 3, (), batched=False)
    assert classes.shape == (3,)
    assert _strings(classes) == ["6.000000:1", "5.000000:3", "4.000000:5"]


def test_k_beyond_the_class_count_returns_every_class() -> None:
    classes = classify(np.array([[3, 1]], np.int32), 10, (), batched=True)
    assert _strings(classes) == [["3:0", "1:1"]]


def test_integers_are_plain_decimals_and_unsigned_values_rank_right() -> None:
    classes = classify(np.array([[200, 7, 255]], np.uint8), 3, (), batched=True)
    assert _strings(classes) == [["255:2", "200:0", "7:1"]]
    big = classify(np.array([2**63 + 5, 1], np.uint64), 1, (), batched=False)
    assert _strings(big) == [f"{2**63 + 5}:0"]
    negative = classify(np.array([[-3, -1]], np.int64), 2, (), batched=True)
    assert _strings(negative) == [["-1:1", "-3:0"]]


def test_floats_print_as_printf_f_does() -> None:
    values = np.array([1e20, -0.5, 1.25e-7], np.float32)
    expected = [f"{float(values[0]):f}:0", "0.000000:2", "-0.500000:1"]
    assert _strings(classify(values, 3, (), batched=False)) == expected
    assert expected[0] == "100000002004087734272.000000:0"


def test_labels_past_the_file_or_empty_lines_give_no_label() -> None:
    classes = classify(np.array([[1.0, 2.0, 3.0]], np.float32), 3, ("a", ""), batched=True)
    assert _strings(classes) == [["3.000000:2", "2.000000:1", "1.000000:0:a"]]


def _io(datatype: str, max_batch_size: int = 8) -> ModelIO:
    spec = TensorSpec("OUT", BY_WIRE[datatype], (3,), False)
    return ModelIO("m", max_batch_size, {}, {"OUT": spec})


@pytest.mark.parametrize("datatype", ["BYTES", "BOOL", "FP16", "BF16"])
def test_types_without_an_order_are_refused_in_tritons_words(datatype: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        check_classification(_io(datatype), {"OUT": 1})
    assert str(error.value) == (
        f"class result not available for output due to unsupported type '{datatype}'"
    )


@pytest.mark.parametrize(
    "datatype", ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32"]
)
def test_numeric_types_are_ranked(datatype: str) -> None:
    check_classification(_io(datatype), {"OUT": 1})


def test_classified_replaces_only_the_outputs_asked_for() -> None:
    spec = TensorSpec("OUT", BY_WIRE["FP32"], (3,), False)
    other = TensorSpec("OTHER", BY_WIRE["FP32"], (3,), False)
    array = np.array([[0.5, 1.5, 1.0]], np.float32)
    outputs = [InferOutput(spec, (1, 3), array), InferOutput(other, (1, 3), array)]
    answered = classified(outputs, {"OUT": 2}, {"OUT": ("x", "y", "z")}, batched=True)
    assert answered[1] is outputs[1]
    assert answered[0].spec == TensorSpec("OUT", BY_WIRE["BYTES"], (2,), False)
    assert answered[0].shape == (1, 2)
    assert _strings(answered[0].array) == [["1.500000:1:y", "1.000000:2:z"]]
