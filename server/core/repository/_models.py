"""Data held for each model: states, loaded versions and index entries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from backends import Instance, TensorMap
from batching import ResourceWait
from proto import model_config_pb2 as mc
from server.contract.model_io import ModelIO
from server.core.cache import VersionCache
from server.core.observability.stats import ModelStats
from server.core.serving import DecoupledRouter, Scheduler
from server.core.serving.ensemble import EnsembleStreams
from server.core.serving.reshape import Reshape

UNLOADED = "unloaded"  # the reason RepositoryIndex gives for a model that is not loaded


class ModelState(StrEnum):
    """Triton's model states, spelled as RepositoryIndex reports them."""

    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(slots=True)
class ModelVersion:
    """One loaded, servable version: its effective config, instances and scheduler."""

    name: str
    version: int
    config: mc.ModelConfig  # effective (auto-completed) config
    io: ModelIO
    instances: list[Instance]  # none for an ensemble
    scheduler: Scheduler  # the dynamic batcher, or an ensemble's step scheduler
    stats: ModelStats
    source: VersionSource  # what it was built from, to tell whether a reload may keep it
    memory_bytes: int  # estimated footprint, counted against the memory budget
    load_s: float  # how long building this version took (instances, warmup, batcher)
    # Per-request conversion the backend needs before batching (None: arrays go as they are).
    prepare: Callable[[TensorMap], dict[str, Any]] | None = None
    # A decoupled model's responses go through it, or those of an ensemble step that streams.
    router: DecoupledRouter | EnsembleStreams | None = None
    reshape: Reshape | None = None  # outputs back to the config's dims (inputs: in `prepare`)
    cache: VersionCache | None = None  # its response cache, when the server and config enable it
    # What its answers depend on (`content_digest`; an ensemble's takes its steps' in), part of
    # its cache keys: set at load when the server has a response cache.
    content: bytes = b""
    resource_wait: ResourceWait | None = None  # its instances' rate-limiter waits (None: off)
    # Each labelled output's class labels (its label_filename, line i names class i).
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def on_device(self) -> bool:
        """Whether every instance computes on a CUDA device (an ensemble step feeding this
        version keeps its outputs there); False for ensembles, which have no instances."""
        return bool(self.instances) and all(i.device.is_cuda for i in self.instances)


@dataclass(frozen=True, slots=True)
class VersionSource:
    """The inputs of a version's build: its config before auto-complete and its model file."""

    config: bytes  # the filled-in config (before auto-complete), deterministically serialized
    file_stamp: tuple[int, int]  # (size, mtime_ns) of the model file


@dataclass(frozen=True, slots=True)
class VersionStatus:
    """What RepositoryIndex says about one version (version None: the model as a whole)."""

    version: int | None
    state: ModelState
    reason: str = ""


@dataclass(slots=True)
class ModelEntry:
    """A model directory and everything known about it."""

    name: str
    path: Path
    config: mc.ModelConfig | None = None  # effective config of the newest loaded version
    ready: dict[int, ModelVersion] = field(default_factory=dict)
    statuses: list[VersionStatus] = field(default_factory=list)
    loaded_ms: int = 0  # wall-clock ms of the last successful load, for LRU before any request
    evicted: bool = False  # unloaded to make room under the memory budget, or idle (keep-alive)
    idle_unloaded: bool = False  # the keep-alive unloaded it (a request loads it again)
    idle_unloads: int = 0  # times the keep-alive unloaded it
    cold_starts: int = 0  # times a request loaded it again after an eviction or idle unload
    cold_start_ns: int = 0  # the time those loads took, summed
    stamp: tuple[object, ...] = ()  # the directory's files when last loaded (poll mode)
    failed_stamp: tuple[object, ...] = ()  # the files of the last load that failed

    @property
    def memory_bytes(self) -> int:
        return sum(v.memory_bytes for v in self.ready.values())

    @property
    def last_used_ms(self) -> int:
        return max([self.loaded_ms, *(v.stats.last_inference_ms for v in self.ready.values())])

    @property
    def idle(self) -> bool:
        return all(v.scheduler.in_flight == 0 for v in self.ready.values())

    @property
    def unloaded(self) -> bool:
        """Unloaded on purpose (not a failure)."""
        return not self.ready and all(s.reason == UNLOADED for s in self.statuses)

    def latest_ready(self) -> ModelVersion | None:
        return self.ready[max(self.ready)] if self.ready else None
