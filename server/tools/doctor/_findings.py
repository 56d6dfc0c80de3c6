"""What `convoy doctor` reports: one finding per pitfall found, with its file and its fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """ERROR: the server would not serve the model as it is; WARNING: it would, badly; INFO:
    worth knowing. Compared by name only."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Check(StrEnum):
    """Which pitfall a finding is about (the JSON's `check`)."""

    CONFIG = "config"  # config.pbtxt cannot be read or is refused as written
    BACKEND = "backend"  # a backend or platform Convoy cannot serve
    VERSIONS = "versions"  # a version directory that is not a number, or none that serves
    MODEL_FILE = "model-file"  # the version's model file is missing or does not open
    BATCH_AXIS = "batch-axis"  # max_batch_size > 0 on a file without a dynamic first axis
    TENSOR_NAMES = "tensor-names"  # config tensors the file does not have, or the reverse
    BATCH_IN_DIMS = "batch-in-dims"  # dims that repeat the batch dimension
    SIGNATURE = "signature"  # any other mismatch between the config and the file
    ENSEMBLE = "ensemble"  # an ensemble whose steps do not fit its models
    MEMORY = "memory"  # instances x weights plus a batch against the memory budget
    QUEUE_DELAY = "queue-delay"  # a batching delay long against the model's own latency
    QUEUE_SIZE = "queue-size"  # a batching model with an unbounded queue
    HOT_RELOAD = "hot-reload"  # files poll mode cannot see change


@dataclass(frozen=True, slots=True)
class Finding:
    """One pitfall of one model (model "" for the repositories as a whole)."""

    severity: Severity
    check: Check
    model: str
    message: str  # what is wrong, in the server's own words where it has them
    path: str  # the file or directory to change
    fix: str  # what to change ("" when the message says it)

    def as_json(self) -> dict[str, Any]:
        return {key: str(value) for key, value in asdict(self).items()}


def has_errors(findings: Sequence[Finding]) -> bool:
    return any(finding.severity is Severity.ERROR for finding in findings)
