"""Building a model's versions: config, instances, warmup and a scheduler per version.

A build never touches what is serving: it returns new versions (or the current ones, kept or
resized in place when nothing else changed) for the repository to swap in. ONNX Runtime,
PyTorch, OpenVINO and Python models get instances and a batcher; an ensemble gets a step
scheduler over its peers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from backends import (
    BackendError,
    CustomMetrics,
    PythonInstance,
    PythonSettings,
    SharedArrays,
    on_daemon_thread,
)
from batching import BatchingError, RateLimiter
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError, ServerError
from server.contract.model_io import ModelIO
from server.core.observability.histograms import LatencyHistograms, histogram_buckets
from server.core.observability.stats import ModelStats
from server.core.repository._agents import run_agents
from server.core.repository._autocomplete import (
    DEFAULT_AUTO_COMPLETE,
    PYTHON_BACKEND,
    AutoComplete,
    fill_identity,
)
from server.core.repository._backends import detect_backend, plan, python_backend_file
from server.core.repository._config import read_config
from server.core.repository._instances import Opening, new_version, resize
from server.core.repository._labels import read_labels
from server.core.repository._model_loading import Answer, from_thread
from server.core.repository._models import ModelState, ModelVersion, VersionSource, VersionStatus
from server.core.repository._validate import check_backend, check_ensemble
from server.core.repository._versions import list_versions, select_versions
from server.core.serving.ensemble import (
    EnsemblePlan,
    EnsembleScheduler,
    EnsembleStreams,
    is_ensemble,
    plan_ensemble,
)
from server.core.serving.submit import model_caller

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Peers:
    """What a version being built sees of the rest of the server: the other models (an
    ensemble's, at load and per request), and what a Python model's instances reach through
    pb_utils (custom metrics, the model loading API)."""

    config_of: Callable[[str], mc.ModelConfig | None]  # a ready model's effective config
    resolve: Callable[[str, str], ModelVersion]  # (model, version "" = newest) -> ready version
    custom_metrics: CustomMetrics  # the server's, where Python models register families
    model_loading: Answer  # a Python model's `pb_utils.load_model` and the like, on the loop


@dataclass(slots=True)
class Built:
    """The outcome of one build: the versions that are ready, and why the others are not."""

    ready: dict[int, ModelVersion] = field(default_factory=dict)
    statuses: list[VersionStatus] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [s.reason for s in self.statuses if s.state is ModelState.UNAVAILABLE]


async def build_model(
    name: str,
    path: Path,
    peers: Peers,
    override: mc.ModelConfig | None = None,
    current: Mapping[int, ModelVersion] | None = None,
    completion: AutoComplete = DEFAULT_AUTO_COMPLETE,
    limiter: RateLimiter | None = None,
    config_name: str | None = None,
    latency_histograms: bool = False,
    backend_directory: Path | None = None,
) -> Built:
    """Build the versions the policy selects; `current` ones are kept if nothing changed;
    `config_name` picks `configs/<name>.pbtxt` over config.pbtxt where a model has it;
    `latency_histograms`: new versions observe Triton's latency histograms;
    `backend_directory`: where Python-based backends are found (Triton's --backend-directory)."""
    built = Built()
    try:
        raw = override if override is not None else read_config(path, config_name)
        raw = raw or mc.ModelConfig()
        config = fill_identity(detect_backend(raw, path), name)
        backend_file = python_backend_file(config, backend_directory)
        check_backend(config, python_based=backend_file is not None)
        await asyncio.to_thread(run_agents, config, path)  # the checksum agent reads the files
        histogram_buckets(config)  # bad buckets fail the model, histograms on or off
        versions = select_versions(name, config.version_policy, list_versions(path))
    except (ServerError, OSError) as exc:
        built.statuses.append(VersionStatus(None, ModelState.UNAVAILABLE, str(exc)))
        return built
    if not versions:
        reason = f"model '{name}': no version directory matches its version policy"
        built.statuses.append(VersionStatus(None, ModelState.UNAVAILABLE, reason))
        return built
    for version in versions:
        previous = (current or {}).get(version)
        try:
            labels = read_labels(config, path)  # each version reads them, as in Triton
            if is_ensemble(config):
                loaded = await _ensemble_version(config, version, peers)
            else:
                loaded = await _build_version(
                    config, path, version, previous, peers, completion, limiter, backend_file
                )
            loaded.labels = labels
            if latency_histograms and loaded.stats.latency is None:
                loaded.stats.latency = LatencyHistograms.from_config(loaded.config)
        except (ServerError, BackendError, BatchingError, OSError) as exc:
            built.statuses.append(VersionStatus(version, ModelState.UNAVAILABLE, str(exc)))
            continue
        built.ready[version] = loaded
        built.statuses.append(VersionStatus(version, ModelState.READY))
    return built


async def _build_version(
    config: mc.ModelConfig,
    path: Path,
    version: int,
    previous: ModelVersion | None,
    peers: Peers,
    completion: AutoComplete,
    limiter: RateLimiter | None,
    backend_file: Path | None = None,
) -> ModelVersion:
    """`backend_file`: the Python-based backend's model.py that runs the model, if one does;
    the version directory then holds whatever that model.py reads."""
    model_file = backend_file or path / str(version) / config.default_model_filename
    if not model_file.is_file():
        raise ConfigError(f"model '{config.name}' version {version}: '{model_file}' not found")
    info = model_file.stat()
    source = VersionSource(
        config.SerializeToString(deterministic=True), (info.st_size, info.st_mtime_ns)
    )
    if previous is not None and previous.source == source:
        return previous
    # Planned from the config as written: the first instance opens before auto-complete.
    placements = plan(config, python_based=backend_file is not None)
    opening = Opening(
        path,
        version,
        model_file,
        placements,
        model_caller(peers.resolve),
        completion,
        limiter,
        SharedArrays(f"{config.name}-{version}"),
        peers.custom_metrics,
        from_thread(peers.model_loading, asyncio.get_running_loop()),
        await _python_settings(config, path, backend_file),
    )
    if (
        previous is not None
        and previous.source.file_stamp == source.file_stamp
        and _only_counts_differ(previous.source.config, source.config)
    ):
        # Instances added to the version share what its instances already share.
        await resize(previous, config, source, replace(opening, shared=_shared_of(previous)))
        return previous
    return await new_version(config, source, opening)


async def _python_settings(
    config: mc.ModelConfig, path: Path, backend_file: Path | None
) -> PythonSettings | None:
    """A Python model's settings (a Python-based backend's model.py among them), its execution
    environment resolved once (a tarball unpacked, its interpreter checked) for every instance
    of the version; None for other backends."""
    if config.backend != PYTHON_BACKEND and backend_file is None:
        return None
    settings = PythonSettings.from_config(config)
    if backend_file is not None:
        settings = replace(settings, backend_file=str(backend_file))
    return await asyncio.to_thread(settings.resolved, config.name, path)


async def _ensemble_version(config: mc.ModelConfig, version: int, peers: Peers) -> ModelVersion:
    """An ensemble version: its plan checked against the composing models as they are now."""
    started_s = time.monotonic()
    check_ensemble(config)
    plan = plan_ensemble(config, peers.config_of)
    stats = ModelStats()
    scheduler = EnsembleScheduler(plan, peers.resolve, stats.record_execution)
    await scheduler.start()
    decoupled = config.model_transaction_policy.decoupled
    router = EnsembleStreams(scheduler) if decoupled or _streams(plan, peers) else None
    _log.info("loaded ensemble '%s' version %d (%d steps)", config.name, version, len(plan.steps))
    return ModelVersion(
        config.name,
        version,
        config,
        ModelIO.from_config(config),
        [],
        scheduler,
        stats,
        VersionSource(config.SerializeToString(deterministic=True), (0, 0)),
        0,
        time.monotonic() - started_s,
        router=router,
    )


def _streams(plan: EnsemblePlan, peers: Peers) -> bool:
    """Whether a step of the ensemble streams its responses (a decoupled model, or an ensemble
    with such a step), as its composing models are loaded now."""
    for step in plan.steps:
        try:
            if peers.resolve(step.model, step.version).router is not None:
                return True
        except ServerError:  # not ready: its step fails when a request reaches it
            continue
    return False


def _shared_of(version: ModelVersion) -> SharedArrays:
    """The arrays a loaded version's Python instances share (its own for any other version)."""
    first = version.instances[0] if version.instances else None
    if isinstance(first, PythonInstance) and first.shared is not None:
        return first.shared
    return SharedArrays(f"{version.name}-{version.version}")


def _only_counts_differ(old: bytes, new: bytes) -> bool:
    """Whether two configs differ at most in their instance groups' counts."""
    configs = []
    for data in (old, new):
        config = mc.ModelConfig.FromString(data)
        for group in config.instance_group:
            group.count = 0
        configs.append(config)
    return bool(configs[0] == configs[1])


async def unload_version(version: ModelVersion, timeout_s: float) -> None:
    """Let accepted requests finish (bounded), then free the instances."""
    await version.scheduler.stop(timeout_s)
    for instance in version.instances:
        # A daemon thread: a stopping server gives up on a finalize that hangs (`App.stop`).
        await on_daemon_thread(instance.close, name="convoy-close")
