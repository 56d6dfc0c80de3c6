"""Fair share: the class served least lately goes first (by weight), and iteration is exactly
the order of popleft."""

import random

from batching import FairLine


def _line(weights: dict[str, int] | None = None) -> FairLine[str]:
    # Items are "class:n"; the class is what precedes the colon.
    return FairLine(lambda item: item.split(":")[0], weights or {})


def _drain(line: FairLine[str], count: int | None = None) -> list[str]:
    out = []
    while line and (count is None or len(out) < count):
        out.append(line.popleft())
    return out


def _classes(items: list[str]) -> list[str]:
    return [item.split(":")[0] for item in items]


def test_classes_that_all_wait_take_turns_whatever_their_arrival_order() -> None:
    line = _line()
    for item in ["a:1", "a:2", "a:3", "a:4", "b:1", "c:1", "b:2"]:
        line.append(item)
    expected = ["a:1", "b:1", "c:1", "a:2", "b:2", "a:3", "a:4"]
    assert list(line) == expected
    assert _drain(line) == expected


def test_iteration_follows_the_service_left_by_earlier_pops() -> None:
    line = _line()
    for item in ["a:1", "a:2", "b:1", "b:2"]:
        line.append(item)
    assert line.popleft() == "a:1"
    assert list(line) == ["b:1", "a:2", "b:2"]
    line.append("c:1")  # a newcomer: after b (not served yet either), ahead of a's backlog
    assert list(line) == ["b:1", "c:1", "a:2", "b:2"]
    assert _drain(line) == ["b:1", "c:1", "a:2", "b:2"]


def test_a_light_clients_waiting_requests_all_go_ahead_of_a_heavy_backlog() -> None:
    """Turn by turn, a light client's second and third requests would each wait a whole round
    of the heavy backlog; served least lately first, they go as if the client were alone."""
    line = _line()
    for n in range(40):
        line.append(f"heavy:{n}")
    assert _drain(line, 20) == [f"heavy:{n}" for n in range(20)]
    for n in range(3):
        line.append(f"light:{n}")
    assert list(line)[:4] == ["light:0", "light:1", "light:2", "heavy:20"]
    assert _drain(line, 4) == ["light:0", "light:1", "light:2", "heavy:20"]


def test_a_client_back_after_a_pause_leads_only_until_its_count_reaches_the_others() -> None:
    line = _line()
    for n in range(300):
        line.append(f"a:{n}")
        line.append(f"b:{n}")
    _drain(line, 200)  # a and b alternate: each has had 100 lately
    for n in range(300):
        line.append(f"c:{n}")
    served = _classes(_drain(line, 60))
    first_other = next(i for i, share in enumerate(served) if share != "c")
    assert 0 < first_other <= 24  # c's lead: a half-life's worth at most
    later = served[first_other:]
    assert later.count("c") >= len(later) // 3 - 2  # then the three share alike


def test_a_weighted_class_takes_that_many_to_one() -> None:
    line = _line({"gold": 3})
    for n in range(200):
        line.append(f"gold:{n}")
        line.append(f"free:{n}")
    served = _classes(_drain(line, 200))
    assert 145 <= served.count("gold") <= 155
    assert served[:4].count("gold") == 3


def test_iteration_is_the_order_of_popleft_over_a_long_random_run() -> None:
    """Past the counts' rescaling (hundreds of pops), with weights, newcomers and classes
    that come and go: what iteration shows is what the pops then hand out."""
    rnd = random.Random(7)
    line = _line({"b": 2, "c": 5})
    served = 0
    for step in range(3000):
        for _ in range(rnd.randrange(3)):
            line.append(f"{rnd.choice('abcdefg')}:{step}")
        if line and rnd.random() < 0.6:
            ahead = list(line)[:5]
            taken = _drain(line, len(ahead))
            assert taken == ahead
            served += len(taken)
    assert served > 1000
    assert list(line) == _drain(line)
    assert not line


def test_one_class_is_plain_fifo() -> None:
    line = _line()
    for n in range(4):
        line.append(f":{n}")
    assert len(line) == 4
    assert _drain(line) == [":0", ":1", ":2", ":3"]
    assert not line
