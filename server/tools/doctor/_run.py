"""`examine`: every model of the repositories, then what only the models together can show
(ensemble steps against their models, memory across all of them)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import Repository, check_ensemble
from server.core.serving.ensemble import is_ensemble, plan_ensemble
from server.tools.doctor._examined import DoctorSettings, Examined
from server.tools.doctor._files import CONFIG_FILENAME
from server.tools.doctor._findings import Check, Finding, Severity
from server.tools.doctor._memory import Usage, check_memory
from server.tools.doctor._model import examine_model


async def examine(
    repositories: Sequence[Path],
    usable_bytes: int,
    settings: DoctorSettings | None = None,
    budget_source: str = "--memory-budget",
) -> tuple[list[str], list[Finding]]:
    """The models found (in load order) and every finding about them."""
    settings = settings or DoctorSettings()
    try:
        found = Repository(list(repositories)).scan()  # as the server finds its models
    except ConfigError as exc:
        return [], [Finding(Severity.ERROR, Check.CONFIG, "", str(exc), "", "")]
    examined = [await examine_model(name, path, settings) for name, path in sorted(found.items())]
    _check_ensembles(examined)
    findings = [finding for model in examined for finding in model.findings]
    usages = [
        Usage(model.name, str(model.path / CONFIG_FILENAME), model.memory_bytes, model.gpu_copies)
        for model in examined
        if model.memory_bytes > 0
    ]
    findings += check_memory(usages, usable_bytes, budget_source)
    return [model.name for model in examined], findings


def _check_ensembles(examined: Sequence[Examined]) -> None:
    """Each ensemble's plan against the completed configs of the models that passed."""
    servable: dict[str, mc.ModelConfig] = {
        model.name: model.config
        for model in examined
        if model.config is not None
        and not is_ensemble(model.config)
        and not any(f.severity is Severity.ERROR for f in model.findings)
    }
    for model in examined:
        if model.config is None or not is_ensemble(model.config):
            continue
        try:
            check_ensemble(model.config)
            plan_ensemble(model.config, servable.get)
        except ConfigError as exc:
            model.add(
                Severity.ERROR,
                Check.ENSEMBLE,
                str(exc),
                model.path / CONFIG_FILENAME,
                "make each step's input_map and output_map name tensors of its model, and "
                "fix the models the steps use (see their findings)",
            )
