"""What the request path reads of a model version (`Servable`), and the two seams behind it: the
version's `Scheduler` and, for a decoupled model, its `StreamRouter`. The repository builds
versions that satisfy `Servable`; nothing here imports the repository."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from backends import BackendError, TensorMap
from batching import Parameters, RequestResult, SequenceStep
from server.contract.model_io import ModelIO
from server.contract.requests import InferOptions
from server.core.cache import VersionCache
from server.core.observability.stats import ModelStats
from server.core.serving.reshape import Reshape


class Scheduler(Protocol):
    """A model version's scheduler: the dynamic batcher, the sequence batcher of a stateful
    model, or an ensemble's step scheduler."""

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered."""
        ...

    @property
    def queue_depth(self) -> int:
        """Requests waiting and not yet executing."""
        ...

    @property
    def waits_for_batch_mates(self) -> bool:
        """Whether its batches wait for batch-mates now, without a queue delay of their own
        (natural batching, `batching.natural`)."""
        ...

    @property
    def waits_out_delay(self) -> bool:
        """Whether its adaptive delay waits out the whole queue delay now, as batches still
        grow at the delay's end on a busy loop (`batching.reach`)."""
        ...

    async def infer(
        self,
        inputs: dict[str, npt.NDArray[Any]],
        batch_size: int,
        priority: int = 0,
        timeout_ns: int = 0,
        parameters: Parameters = ...,
        device_outputs: bool = False,
        sequence: SequenceStep | None = None,
        *,
        deadline_ns: int = 0,
        share: str = "",
        in_turn: bool = False,
    ) -> RequestResult: ...

    async def stop(self, timeout_s: float) -> None:
        """Refuse new requests, let accepted ones finish (bounded)."""
        ...


@dataclass(frozen=True, slots=True)
class Streamed:
    """One response of a decoupled request: outputs or an error, and whether it is the last."""

    outputs: dict[str, np.ndarray] | None  # None: a final flag without a response
    error: BackendError | None
    final: bool


class StreamRouter(Protocol):
    """Serves a decoupled version's requests: 0..N responses each."""

    def stream(
        self,
        target: Servable,
        arrays: dict[str, npt.NDArray[Any]],
        batch_size: int,
        options: InferOptions,
    ) -> AsyncGenerator[Streamed, None]: ...


class Servable(Protocol):
    """One loaded version as the request path sees it."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def io(self) -> ModelIO: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def stats(self) -> ModelStats: ...

    @property
    def prepare(self) -> Callable[[TensorMap], dict[str, Any]] | None:
        """Per-request conversion the backend needs before batching (None: none)."""
        ...

    @property
    def router(self) -> StreamRouter | None:
        """A decoupled version's responses go through it (None: one response per request)."""
        ...

    @property
    def reshape(self) -> Reshape | None:
        """Outputs back to the config's dims (None: no reshape)."""
        ...

    @property
    def on_device(self) -> bool:
        """Whether every instance computes on a CUDA device."""
        ...

    @property
    def cache(self) -> VersionCache | None:
        """The response cache its requests go through (None: not cached)."""
        ...
