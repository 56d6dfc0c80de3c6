"""`FairLine`: one priority level's waiting requests served by class (fair share).

Each class (a client's header value; "" for requests without one) keeps its own FIFO, and the
next request comes from the waiting class that was served least lately: every request served
adds to its class's count, divided by the class's weight, and what was served earlier counts
for less and less (half as much `HALF_LIFE` requests later, whichever classes they were). So
classes that all wait alternate (a class of weight w taking w requests to another's one), while
a client whose share of the service lately is below the others' (a light client beside a heavy
one) has each of its waiting requests served ahead of their backlog, as if it were alone: fair
share by rate, max-min fair, not only turn by turn. A class's lead is bounded by the half-life: a
client that comes back after a long pause goes first only until its count reaches the others'.

Iteration yields exactly the order in which `popleft` hands the requests out, so batch selection
sees the service order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

Item = TypeVar("Item")

HALF_LIFE = 24  # requests served: the service that long ago counts half
_GROWTH = 2.0 ** (1 / HALF_LIFE)  # each request served adds this much more than the one before
# Counts are scaled down by a power of two, which changes no comparison, once the next request
# would add this much; counts that are then below 1 are too old to matter and are forgotten.
_RESCALE_AT = 2.0**32


class FairLine(Generic[Item]):
    """Per-class FIFOs, the class served least lately first; the subset of `deque` that the
    queue uses."""

    def __init__(self, share_of: Callable[[Item], str], weights: Mapping[str, int]) -> None:
        self._share_of = share_of
        self._weights = weights  # per class, >= 1; a class not named weighs 1
        self._lines: dict[str, deque[Item]] = {}  # the classes with requests waiting
        self._order: list[tuple[float, int, str]] = []  # a heap of (served, seq, class) of those
        self._served: dict[str, float] = {}  # the count of each class served lately, not waiting
        self._unit = 1.0  # what the next request served adds to its class's count (weight 1)
        self._seq = 0  # ties go to the class that joined the heap first
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return bool(self._count)

    def append(self, item: Item) -> None:
        share = self._share_of(item)
        line = self._lines.get(share)
        if line is None:
            line = self._lines[share] = deque()
            heapq.heappush(self._order, (self._served.pop(share, 0.0), self._seq, share))
            self._seq += 1
        line.append(item)
        self._count += 1

    def popleft(self) -> Item:
        if not self._order:
            raise IndexError("pop from an empty FairLine")
        share = self._order[0][2]
        line = self._lines[share]
        item = line.popleft()
        self._count -= 1
        served = self._serve_first(self._order, self._unit, self._seq, bool(line))
        self._unit *= _GROWTH
        if line:
            self._seq += 1
        else:  # its count waits here until it has requests again
            del self._lines[share]
            self._served[share] = served
        if self._unit >= _RESCALE_AT:
            self._rescale()
        return item

    def _serve_first(
        self, order: list[tuple[float, int, str]], unit: float, seq: int, more: bool
    ) -> float:
        """Count one request served for the class first in `order` (the line's own heap, or
        iteration's copy of it): its count grows by `unit` over the class's weight, and it keeps
        a place under `seq` while it has `more` waiting, else leaves the heap. Its new count."""
        served, _, share = order[0]
        served += unit / self._weights.get(share, 1)
        if more:
            heapq.heapreplace(order, (served, seq, share))
        else:
            heapq.heappop(order)
        return served

    def _rescale(self) -> None:
        """Scale every count and the unit down by `_RESCALE_AT` (exactly: a power of two), and
        forget the classes with nothing waiting whose count is then below one request's."""
        scale = 1 / _RESCALE_AT
        self._unit *= scale
        self._order = [(served * scale, seq, share) for served, seq, share in self._order]
        self._served = {
            share: served * scale for share, served in self._served.items() if served * scale >= 1.0
        }

    def __iter__(self) -> Iterator[Item]:
        """The items in the order `popleft` would hand them out (the same arithmetic on a copy
        of the order; rescaling changes no comparison, so it is left out)."""
        order = list(self._order)
        items: dict[str, Iterator[Item]] = {}  # each class's, as far as handed out
        left: dict[str, int] = {}  # each class's not handed out yet
        unit, seq = self._unit, self._seq
        while order:
            share = order[0][2]
            if share not in items:
                items[share], left[share] = iter(self._lines[share]), len(self._lines[share])
            yield next(items[share])
            left[share] -= 1
            self._serve_first(order, unit, seq, bool(left[share]))
            unit *= _GROWTH
            if left[share]:
                seq += 1
