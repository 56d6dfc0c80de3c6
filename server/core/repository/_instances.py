"""A version's instances: opened for a new version (auto-complete, warmup, then its batcher
started), or added and retired in place when only the instance groups' counts changed."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from backends import (
    CustomMetrics,
    Instance,
    ModelCaller,
    ModelControl,
    ModelSignature,
    Placement,
    PythonInstance,
    PythonSettings,
    SharedArrays,
    on_daemon_thread,
    prepare_inputs,
)
from batching import Batcher, BatchPolicy, Executor, RateLimiter, SequenceBatcher
from proto import model_config_pb2 as mc
from server.contract.model_io import ModelIO
from server.core.observability.stats import ModelStats
from server.core.repository._autocomplete import AutoComplete, autocomplete
from server.core.repository._backends import (
    default_instance_count,
    device_count,
    open_instance,
    report_providers,
)
from server.core.repository._budget import footprint_bytes
from server.core.repository._keep_alive import keep_alive_of
from server.core.repository._limits import instance_needs, register_instances
from server.core.repository._models import ModelVersion, VersionSource
from server.core.repository._sequence import sequence_policy
from server.core.repository._validate import check_python_io, check_signature
from server.core.repository._warmup import Prepare, warm_up
from server.core.serving import RaggedExecutor, RaggedPlan
from server.core.serving.decoupled import DecoupledExecutor, DecoupledRouter
from server.core.serving.ensemble import EnsembleStreams
from server.core.serving.reshape import Reshape

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Opening:
    """Where a version's instances come from, and how its config is completed."""

    path: Path  # the model directory
    version: int
    model_file: Path
    placements: Sequence[Placement]  # one per instance
    caller: ModelCaller  # how a Python model's `InferenceRequest.exec` reaches other models
    completion: AutoComplete  # what the model file may fill into the config
    limiter: RateLimiter | None  # the server's rate limiter (None: off)
    shared: SharedArrays  # what a Python model's instances share (`pb_utils.shared_array`)
    metrics: CustomMetrics  # the server's custom metrics (`pb_utils.MetricFamily`)
    control: ModelControl  # the model loading API, for a Python model's threads
    # A Python model's (or a Python-based backend's), its environment resolved for the
    # version; None: another backend runs it.
    python: PythonSettings | None


async def new_version(
    config: mc.ModelConfig, source: VersionSource, opening: Opening
) -> ModelVersion:
    started_s = time.monotonic()
    python = opening.python is not None
    path, version, placements = opening.path, opening.version, opening.placements
    instances: list[Instance] = []
    ragged: RaggedPlan | None = None
    try:
        if python:  # model.py may complete the config; initialize() sees the completed one
            if opening.completion.enabled:
                assert opening.python is not None  # resolved for every Python model
                config = await on_daemon_thread(
                    PythonInstance.complete_config,
                    path,
                    version,
                    config,
                    opening.python,
                    name="convoy-auto-complete",
                )
            check_python_io(config)
            effective = _complete(config, ModelSignature((), ()), opening.completion, True)
        else:
            instances.append(await _open_instance(config, opening, 0))
            effective = _complete(config, instances[0].signature, opening.completion, False)
            effective = report_providers(effective, instances[0])
            ragged = check_signature(effective, instances[0].signature)
        policy = BatchPolicy.from_config(effective)
        keep_alive_of(effective, 0.0)  # a bad convoy_keep_alive_s fails the load
        sequences = (
            sequence_policy(effective, path) if effective.HasField("sequence_batching") else None
        )
        count = len(placements)
        for index in range(len(instances), count):
            instances.append(await _open_instance(effective, opening, index))
        reshape = Reshape.from_config(effective)
        prepare = _preparation(reshape, strings=not python and _takes_strings(effective))
        await warm_up(effective, path, version, [_ragged(i, ragged) for i in instances], prepare)
        needs = instance_needs(opening.limiter, effective, placements, instances)
    except BaseException:
        for instance in instances:
            instance.close()
        raise
    stats = ModelStats()
    router = DecoupledRouter() if effective.model_transaction_policy.decoupled else None
    executors = [_executor(instance, router, ragged) for instance in instances]
    resource_wait = register_instances(opening.limiter, executors, needs, None)
    label = f"{config.name}:{version}"
    batcher: Batcher | SequenceBatcher = (
        Batcher(label, executors, policy, stats.record_execution, opening.limiter)
        if sequences is None
        else SequenceBatcher(label, executors, sequences, stats.record_execution, opening.limiter)
    )
    await batcher.start()
    _log.info(
        "loaded model '%s' version %d with %d instance(s)", config.name, version, len(instances)
    )
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
        prepare=prepare,
        router=router,
        reshape=reshape,
        resource_wait=resource_wait,
    )


async def _open_instance(config: mc.ModelConfig, opening: Opening, index: int) -> Instance:
    """Instance `index` of a version: a Python worker, or an ONNX Runtime, PyTorch or OpenVINO
    instance where planned."""
    name = f"{config.name}_{opening.version}_{index}"
    # On daemon threads: a stopping server does not wait for a model's initialize that hangs.
    if opening.python is not None:
        return await on_daemon_thread(
            PythonInstance.load,
            name,
            opening.path,
            opening.version,
            config,
            opening.python,
            opening.caller,
            opening.shared,
            opening.metrics,
            opening.control,
            opening.placements[index].device,
            name="convoy-open",
        )
    return await on_daemon_thread(
        open_instance,
        config,
        name,
        opening.model_file,
        opening.placements[index],
        name="convoy-open",
    )


def _executor(
    instance: Instance, router: DecoupledRouter | EnsembleStreams | None, plan: RaggedPlan | None
) -> Executor:
    """What the batcher runs an instance through: a decoupled model's router, or a ragged
    model's batch assembly (never both: a decoupled model is a Python one)."""
    if router is None:
        return _ragged(instance, plan)
    # Only Python models may be decoupled; an ensemble has no instances.
    assert isinstance(instance, PythonInstance) and isinstance(router, DecoupledRouter)
    return router.executor(instance)


def _ragged(instance: Instance, plan: RaggedPlan | None) -> Instance | RaggedExecutor:
    return instance if plan is None else RaggedExecutor(instance, plan)


def _instance_of(executor: Executor) -> Instance:
    """The instance behind an executor `_executor` made."""
    if isinstance(executor, RaggedExecutor | DecoupledExecutor):
        return executor.instance
    return cast(Instance, executor)


def _complete(
    config: mc.ModelConfig, signature: ModelSignature, completion: AutoComplete, python: bool
) -> mc.ModelConfig:
    return autocomplete(
        config,
        signature,
        completion,
        default_instance_count=default_instance_count(config),
        cuda_device_count=device_count(config, python_based=python),
    )


def _preparation(reshape: Reshape | None, strings: bool) -> Prepare | None:
    """A request's per-request conversion before batching: the config's reshapes, then the
    text the ONNX Runtime binding needs for strings; None when there is nothing to do."""
    if reshape is None:
        return prepare_inputs if strings else None
    if not strings:
        return reshape.to_model
    return lambda arrays: prepare_inputs(reshape.to_model(arrays))


def _takes_strings(config: mc.ModelConfig) -> bool:
    return any(t.data_type == mc.TYPE_STRING for t in config.input)


async def resize(
    target: ModelVersion, config: mc.ModelConfig, source: VersionSource, opening: Opening
) -> None:
    """Add or retire instances in place; the version keeps serving throughout."""
    batcher = target.scheduler
    assert isinstance(batcher, Batcher | SequenceBatcher)  # only versions with instances
    python = opening.python is not None
    effective = _complete(config, target.instances[0].signature, opening.completion, python)
    effective = report_providers(effective, target.instances[0])
    placements = opening.placements
    wanted = len(placements)
    while len(target.instances) < wanted:
        instance = await _open_instance(effective, opening, len(target.instances))
        first = len(target.instances)
        limits = instance_needs(opening.limiter, effective, placements, [instance], first)
        target.instances.append(instance)
        executor = _executor(instance, target.router, RaggedPlan.from_config(effective))
        register_instances(opening.limiter, [executor], limits, target.resource_wait)
        batcher.add_executor(executor)
    while len(target.instances) > wanted:
        retired = await batcher.retire_executor()
        closing = next(i for i in target.instances if _instance_of(retired) is i)
        target.instances.remove(closing)
        await on_daemon_thread(closing.close, name="convoy-close")
    target.config = effective
    target.source = source
    target.memory_bytes = footprint_bytes(effective, source.file_stamp[0], wanted)
    _log.info("model '%s' version %d now runs %d instance(s)", target.name, target.version, wanted)
