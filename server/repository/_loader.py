"""Building a model's versions: config, instances, warmup and a batcher per version.

A build never touches what is serving: it returns new versions (or the current ones, kept or
resized in place when nothing else changed) for the repository to swap in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from backends import BackendError, Instance, OrtInstance, OrtSettings, prepare_inputs
from batching import Batcher, BatchingError, BatchPolicy
from proto import model_config_pb2 as mc
from server.datatypes import BY_CONFIG, decode_raw
from server.errors import ConfigError, ServerError
from server.inference import ModelIO
from server.repository._autocomplete import autocomplete, fill_identity
from server.repository._budget import footprint_bytes
from server.repository._config import read_config
from server.repository._models import ModelState, ModelVersion, VersionSource, VersionStatus
from server.repository._validate import check_backend, check_signature
from server.repository._versions import list_versions, select_versions
from server.stats import ModelStats

_log = logging.getLogger(__name__)

WARMUP_DIR = "warmup"  # input_data_file paths are relative to <model>/warmup, as Triton's


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
    override: mc.ModelConfig | None = None,
    current: Mapping[int, ModelVersion] | None = None,
) -> Built:
    """Build the versions the policy selects; `current` ones are kept if nothing changed."""
    built = Built()
    try:
        raw = override if override is not None else read_config(path) or mc.ModelConfig()
        config = fill_identity(raw, name)
        check_backend(config)
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
            loaded = await _build_version(config, path, version, previous)
        except (ServerError, BackendError, BatchingError, OSError) as exc:
            built.statuses.append(VersionStatus(version, ModelState.UNAVAILABLE, str(exc)))
            continue
        built.ready[version] = loaded
        built.statuses.append(VersionStatus(version, ModelState.READY))
    return built


async def _build_version(
    config: mc.ModelConfig, path: Path, version: int, previous: ModelVersion | None
) -> ModelVersion:
    model_file = path / str(version) / config.default_model_filename
    if not model_file.is_file():
        raise ConfigError(f"model '{config.name}' version {version}: '{model_file}' not found")
    info = model_file.stat()
    source = VersionSource(
        config.SerializeToString(deterministic=True), (info.st_size, info.st_mtime_ns)
    )
    if previous is not None:
        if previous.source == source:
            return previous
        if previous.source.file_stamp == source.file_stamp and _only_counts_differ(
            previous.source.config, source.config
        ):
            await _resize(previous, config, source, model_file)
            return previous
    return await _new_version(config, path, version, model_file, source)


async def _new_version(
    config: mc.ModelConfig, path: Path, version: int, model_file: Path, source: VersionSource
) -> ModelVersion:
    started_s = time.monotonic()
    settings = OrtSettings.from_config(config)
    first = await asyncio.to_thread(
        OrtInstance.load, f"{config.name}_{version}_0", model_file, settings
    )
    instances: list[Instance] = [first]
    try:
        effective = autocomplete(config, first.signature)
        check_signature(effective, first.signature)
        policy = BatchPolicy.from_config(effective)
        for index in range(1, _instance_count(effective)):
            instances.append(
                await asyncio.to_thread(
                    OrtInstance.load, f"{config.name}_{version}_{index}", model_file, settings
                )
            )
        await _warm_up(effective, path, version, instances)
    except BaseException:
        for instance in instances:
            instance.close()
        raise
    stats = ModelStats()
    batcher = Batcher(f"{config.name}:{version}", instances, policy, stats.record_execution)
    await batcher.start()
    _log.info(
        "loaded model '%s' version %d with %d instance(s)", config.name, version, len(instances)
    )
    takes_strings = any(t.data_type == mc.TYPE_STRING for t in effective.input)
    return ModelVersion(
        config.name,
        version,
        effective,
        ModelIO.from_config(effective),
        instances,
        batcher,
        stats,
        source,
        footprint_bytes(effective, source.file_stamp[0], len(instances)),
        time.monotonic() - started_s,
        prepare=prepare_inputs if takes_strings else None,
    )


def _instance_count(config: mc.ModelConfig) -> int:
    return sum(group.count for group in config.instance_group)


def _only_counts_differ(old: bytes, new: bytes) -> bool:
    """Whether two configs differ at most in their instance groups' counts."""
    configs = []
    for data in (old, new):
        config = mc.ModelConfig.FromString(data)
        for group in config.instance_group:
            group.count = 0
        configs.append(config)
    return bool(configs[0] == configs[1])


async def _resize(
    target: ModelVersion, config: mc.ModelConfig, source: VersionSource, model_file: Path
) -> None:
    """Add or retire instances in place; the version keeps serving throughout."""
    effective = autocomplete(config, target.instances[0].signature)
    wanted = _instance_count(effective)
    settings = OrtSettings.from_config(config)
    while len(target.instances) < wanted:
        index = len(target.instances)
        instance = await asyncio.to_thread(
            OrtInstance.load, f"{config.name}_{target.version}_{index}", model_file, settings
        )
        target.instances.append(instance)
        target.batcher.add_executor(instance)
    while len(target.instances) > wanted:
        retired = await target.batcher.retire_executor()
        closing = next(i for i in target.instances if i is retired)
        target.instances.remove(closing)
        await asyncio.to_thread(closing.close)
    target.config = effective
    target.source = source
    target.memory_bytes = footprint_bytes(effective, source.file_stamp[0], wanted)
    _log.info("model '%s' version %d now runs %d instance(s)", target.name, target.version, wanted)


async def _warm_up(
    config: mc.ModelConfig, path: Path, version: int, instances: list[Instance]
) -> None:
    """Run the config's warmup requests on every instance; a failure fails the load."""
    for warmup in config.model_warmup:
        try:
            inputs = _warmup_inputs(config, warmup, path)
            for _ in range(max(warmup.count, 1)):
                for instance in instances:
                    await _check_warmup(instance, inputs)
        except (ServerError, BackendError, OSError, ValueError) as exc:
            raise ConfigError(
                f"model '{config.name}' version {version}: warmup '{warmup.name}' failed: {exc}"
            ) from exc
        _log.info("model '%s' version %d: warmup '%s' done", config.name, version, warmup.name)


async def _check_warmup(instance: Instance, inputs: dict[str, np.ndarray]) -> None:
    result = await instance.execute([inputs])
    for response in result.responses:
        if isinstance(response, BackendError):
            raise response


def _warmup_inputs(
    config: mc.ModelConfig, warmup: mc.ModelWarmup, path: Path
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    batch = (max(warmup.batch_size, 1),) if config.max_batch_size > 0 else ()
    arrays = {}
    for name, spec in warmup.inputs.items():
        datatype = BY_CONFIG.get(spec.data_type)
        if datatype is None:
            raise ConfigError(f"input '{name}' has no valid data_type")
        shape = (*batch, *spec.dims)
        choice = spec.WhichOneof("input_data_type")
        if choice == "input_data_file":
            file = (path / WARMUP_DIR / spec.input_data_file).resolve()
            if (path / WARMUP_DIR).resolve() not in file.parents:
                raise ConfigError(f"input '{name}': '{spec.input_data_file}' is outside warmup/")
            single = decode_raw(name, datatype, tuple(spec.dims), file.read_bytes())
            arrays[name] = np.broadcast_to(single, shape).copy()
        elif datatype.wire == "BYTES":
            fill = b"" if choice == "zero_data" else b"warmup"
            arrays[name] = np.full(shape, fill, dtype=object)
        elif choice == "random_data":
            arrays[name] = rng.integers(0, 2, size=shape).astype(datatype.numpy)
        else:
            arrays[name] = np.zeros(shape, dtype=datatype.numpy)
    return prepare_inputs(arrays)


async def unload_version(version: ModelVersion, timeout_s: float) -> None:
    """Let accepted requests finish (bounded), then free the instances."""
    await version.batcher.stop(timeout_s)
    for instance in version.instances:
        await asyncio.to_thread(instance.close)
