"""What serves a model version's requests (its `Scheduler`), and `submit`: one request handed to a
version's scheduler and counted in that version's statistics."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

from backends import BackendError
from batching import QueueFullError, RequestResult, RequestTimeoutError
from server.inference import InferOptions

if TYPE_CHECKING:
    from server.repository import ModelVersion


class Scheduler(Protocol):
    """A model version's scheduler: the dynamic batcher, or an ensemble's step scheduler."""

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered."""
        ...

    @property
    def queue_depth(self) -> int:
        """Requests waiting and not yet executing."""
        ...

    async def infer(
        self,
        inputs: dict[str, npt.NDArray[Any]],
        batch_size: int,
        priority: int = 0,
        timeout_ns: int = 0,
    ) -> RequestResult: ...

    async def stop(self, timeout_s: float) -> None:
        """Refuse new requests, let accepted ones finish (bounded)."""
        ...


async def submit(
    target: ModelVersion,
    arrays: dict[str, npt.NDArray[Any]],
    batch_size: int,
    options: InferOptions,
) -> RequestResult:
    """Run one checked request on a version and count it, success or failure, by Triton's
    failure reasons."""
    if target.prepare is not None:
        arrays = target.prepare(arrays)
    start_ns = time.monotonic_ns()
    try:
        result = await target.scheduler.infer(
            arrays, batch_size, options.priority, options.timeout_us * 1000
        )
    except (QueueFullError, RequestTimeoutError):
        target.stats.record_failure(time.monotonic_ns() - start_ns, "REJECTED")
        raise
    except asyncio.CancelledError:
        target.stats.record_failure(time.monotonic_ns() - start_ns, "CANCELED")
        raise
    except BackendError:
        target.stats.record_failure(time.monotonic_ns() - start_ns, "BACKEND")
        raise
    except Exception:
        target.stats.record_failure(time.monotonic_ns() - start_ns, "OTHER")
        raise
    target.stats.record_success(result, time.monotonic_ns() - start_ns)
    return result
