"""Assembly: inputs concatenated along the batch axis, outputs split back as views."""

import numpy as np

from backends import concat_inputs, split_outputs


def test_concatenates_in_request_order_and_splits_back() -> None:
    requests = [
        {"x": np.full((1, 2), 1.0), "s": np.array([[b"a"]], dtype=object)},
        {"x": np.full((3, 2), 2.0), "s": np.array([[b"b"], [b"c"], [b"d"]], dtype=object)},
    ]
    batch = concat_inputs(requests)
    assert batch["x"].shape == (4, 2)
    assert batch["s"].ravel().tolist() == [b"a", b"b", b"c", b"d"]
    parts = split_outputs({"y": batch["x"] * 10}, [1, 3])
    assert parts[0]["y"].tolist() == [[10.0, 10.0]]
    assert parts[1]["y"].shape == (3, 2)


def test_a_single_request_is_passed_through_without_copies() -> None:
    x = np.zeros((2, 2))
    assert concat_inputs([{"x": x}])["x"] is x
    assert split_outputs({"y": x}, [2])[0]["y"] is x
