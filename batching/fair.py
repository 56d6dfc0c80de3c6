"""`FairLine`: one priority level's waiting requests served by class in turn (fair share).

Each class (a client's header value; "" for requests without one) keeps its own FIFO; the
classes take turns, a class of weight w taking w requests per turn. A class that had nothing
waiting joins ahead of those with a backlog (after the other newcomers), as FQ-CoDel's new flows
do: a light client's request goes into the next batch instead of a whole round later. Iteration
yields exactly the order in which `popleft` hands the requests out, so batch selection sees the
service order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

Item = TypeVar("Item")


class FairLine(Generic[Item]):
    """Per-class FIFOs served in turn; the subset of `deque` that the queue uses."""

    def __init__(self, share_of: Callable[[Item], str], weights: Mapping[str, int]) -> None:
        self._share_of = share_of
        self._weights = weights  # per class, >= 1; a class not named weighs 1
        self._lines: dict[str, deque[Item]] = {}
        self._turns: deque[str] = deque()  # classes with requests, the one being served first
        self._used = 0  # requests the first class has taken in its current turn
        self._fresh = 0  # newcomers not yet served, just after the class in its turn (if any)

    def _weight(self, share: str) -> int:
        return self._weights.get(share, 1)

    def __len__(self) -> int:
        return sum(len(line) for line in self._lines.values())

    def __bool__(self) -> bool:
        return bool(self._turns)

    def append(self, item: Item) -> None:
        share = self._share_of(item)
        line = self._lines.get(share)
        if line is None:
            line = self._lines[share] = deque()
            self._turns.insert((1 if self._used else 0) + self._fresh, share)
            self._fresh += 1
        line.append(item)

    def popleft(self) -> Item:
        if not self._turns:
            raise IndexError("pop from an empty FairLine")
        share = self._turns[0]
        line = self._lines[share]
        item = line.popleft()
        if not self._used and self._fresh:  # a newcomer's turn begins
            self._fresh -= 1
        self._used += 1
        if not line:
            del self._lines[share]
            self._turns.popleft()
            self._used = 0
        elif self._used >= self._weight(share):
            self._turns.rotate(-1)
            self._used = 0
        return item

    def __iter__(self) -> Iterator[Item]:
        """The items in the order `popleft` would hand them out."""
        order = list(self._turns)
        lines = {share: iter(self._lines[share]) for share in order}
        index = 0
        credit = self._weight(order[0]) - self._used if order else 0
        while order:
            share = order[index]
            item = next(lines[share], None)
            if item is None:  # this class is done: the next one starts a full turn
                order.pop(index)
                if not order:
                    return
                index %= len(order)
                credit = self._weight(order[index])
                continue
            yield item
            credit -= 1
            if credit <= 0:
                index = (index + 1) % len(order)
                credit = self._weight(order[index])
