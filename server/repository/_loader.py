"""Loading one model directory: config, versions, instances and a batcher per version."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from backends import BackendError, Instance, OrtInstance, OrtSettings, prepare_inputs
from batching import Batcher, BatchingError, BatchPolicy
from proto import model_config_pb2 as mc
from server.errors import ConfigError, ServerError
from server.inference import ModelIO
from server.repository._autocomplete import autocomplete, fill_identity
from server.repository._config import read_config
from server.repository._models import ModelEntry, ModelState, ModelVersion, VersionStatus
from server.repository._validate import check_backend, check_signature
from server.repository._versions import list_versions, select_versions
from server.stats import ModelStats

_log = logging.getLogger(__name__)


async def load_model(name: str, path: Path) -> ModelEntry:
    """Load every version the policy selects; failures become UNAVAILABLE with a reason."""
    entry = ModelEntry(name, path)
    try:
        config = fill_identity(read_config(path) or mc.ModelConfig(), name)
        check_backend(config)
        versions = select_versions(name, config.version_policy, list_versions(path))
    except (ServerError, OSError) as exc:
        entry.statuses.append(VersionStatus(None, ModelState.UNAVAILABLE, str(exc)))
        _log.error("model '%s' is unavailable: %s", name, exc)
        return entry
    if not versions:
        reason = f"model '{name}': no version directory matches its version policy"
        entry.statuses.append(VersionStatus(None, ModelState.UNAVAILABLE, reason))
        _log.error("%s", reason)
        return entry
    for version in versions:
        try:
            loaded = await _load_version(config, path, version)
        except (ServerError, BackendError, BatchingError) as exc:
            entry.statuses.append(VersionStatus(version, ModelState.UNAVAILABLE, str(exc)))
            _log.error("model '%s' version %d is unavailable: %s", name, version, exc)
            continue
        entry.ready[version] = loaded
        entry.statuses.append(VersionStatus(version, ModelState.READY))
    newest = entry.latest_ready()
    if newest is not None:
        entry.config = newest.config
    return entry


async def _load_version(config: mc.ModelConfig, path: Path, version: int) -> ModelVersion:
    model_file = path / str(version) / config.default_model_filename
    if not model_file.is_file():
        raise ConfigError(f"model '{config.name}' version {version}: '{model_file}' not found")
    settings = OrtSettings.from_config(config)
    first = await asyncio.to_thread(
        OrtInstance.load, f"{config.name}_{version}_0", model_file, settings
    )
    instances: list[Instance] = [first]
    try:
        effective = autocomplete(config, first.signature)
        check_signature(effective, first.signature)
        policy = BatchPolicy.from_config(effective)
        count = sum(group.count for group in effective.instance_group)
        for index in range(1, count):
            instances.append(
                await asyncio.to_thread(
                    OrtInstance.load, f"{config.name}_{version}_{index}", model_file, settings
                )
            )
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
        prepare=prepare_inputs if takes_strings else None,
    )


async def unload_version(version: ModelVersion, timeout_s: float) -> None:
    """Let accepted requests finish (bounded), then free the instances."""
    await version.batcher.stop(timeout_s)
    for instance in version.instances:
        await asyncio.to_thread(instance.close)
