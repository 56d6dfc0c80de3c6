"""Fair share: classes served in turn (by weight), iteration in exactly the order of popleft."""

from batching import FairLine


def _line(weights: dict[str, int] | None = None) -> FairLine[str]:
    # Items are "class:n"; the class is what precedes the colon.
    return FairLine(lambda item: item.split(":")[0], weights or {})


def _drain(line: FairLine[str]) -> list[str]:
    out = []
    while line:
        out.append(line.popleft())
    return out


def test_classes_take_turns_whatever_their_arrival_order() -> None:
    line = _line()
    for item in ["a:1", "a:2", "a:3", "a:4", "b:1", "c:1", "b:2"]:
        line.append(item)
    expected = ["a:1", "b:1", "c:1", "a:2", "b:2", "a:3", "a:4"]
    assert list(line) == expected
    assert _drain(line) == expected


def test_iteration_follows_the_turn_left_by_earlier_pops() -> None:
    line = _line()
    for item in ["a:1", "a:2", "b:1", "b:2"]:
        line.append(item)
    assert line.popleft() == "a:1"
    assert list(line) == ["b:1", "a:2", "b:2"]
    line.append("c:1")  # a newcomer: after b (not served yet either), ahead of a's backlog
    assert list(line) == ["b:1", "c:1", "a:2", "b:2"]
    assert _drain(line) == ["b:1", "c:1", "a:2", "b:2"]


def test_a_newcomer_goes_ahead_of_a_backlog_but_not_of_a_turn_in_progress() -> None:
    line = _line({"heavy": 2})
    for n in range(6):
        line.append(f"heavy:{n}")
    assert line.popleft() == "heavy:0"  # heavy's turn of 2 is in progress
    line.append("light:0")
    line.append("other:0")
    assert list(line)[:5] == ["heavy:1", "light:0", "other:0", "heavy:2", "heavy:3"]
    assert _drain(line)[:4] == ["heavy:1", "light:0", "other:0", "heavy:2"]
    line.append("light:1")  # light, served and gone, comes back new
    line.append("heavy:9")
    assert list(line) == ["light:1", "heavy:9"]


def test_a_weighted_class_takes_that_many_per_turn() -> None:
    line = _line({"gold": 3})
    for n in range(5):
        line.append(f"gold:{n}")
        line.append(f"free:{n}")
    expected = ["gold:0", "gold:1", "gold:2", "free:0", "gold:3", "gold:4", "free:1"]
    assert list(line)[:7] == expected
    assert _drain(line)[:7] == expected


def test_one_class_is_plain_fifo() -> None:
    line = _line()
    for n in range(4):
        line.append(f":{n}")
    assert len(line) == 4
    assert _drain(line) == [":0", ":1", ":2", ":3"]
    assert not line
