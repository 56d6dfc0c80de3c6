"""The line `convoy profile` writes into a config.pbtxt it recommends, with what it measured,
and its reading by `convoy doctor` (a protobuf text comment: the server never sees it)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = "# convoy profile: batch"
_LINE = re.compile(r"^# convoy profile: batch (\d+) executes in ([0-9.]+) ms\b", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class MeasuredExecution:
    """How long one execution of a batch took, as measured on the instances' device."""

    batch_size: int  # >= 1
    execute_ms: float  # median compute time of one execution of that batch


def measured_line(measured: MeasuredExecution) -> str:
    """The comment line that records `measured` (doctor reads it back)."""
    return f"{_PREFIX} {measured.batch_size} executes in {measured.execute_ms:.3f} ms"


def read_measured(config_text: str) -> MeasuredExecution | None:
    """The measurement a config.pbtxt records, or None when it has none."""
    match = _LINE.search(config_text)
    if match is None:
        return None
    return MeasuredExecution(int(match.group(1)), float(match.group(2)))
