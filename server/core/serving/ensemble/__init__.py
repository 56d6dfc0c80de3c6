"""Ensembles: a DAG of composing models served as one model (Triton's ensemble scheduling)."""

from server.core.serving.ensemble._plan import (
    ENSEMBLE_PLATFORM,
    EnsemblePlan,
    Step,
    composing_models,
    is_ensemble,
    plan_ensemble,
)
from server.core.serving.ensemble._scheduler import (
    EnsembleResult,
    EnsembleScheduler,
    EnsembleStreams,
    StepRun,
)
from server.core.serving.ensemble._slots import StepSlots, step_producers

__all__ = [
    "ENSEMBLE_PLATFORM",
    "EnsemblePlan",
    "EnsembleResult",
    "EnsembleScheduler",
    "EnsembleStreams",
    "Step",
    "StepRun",
    "StepSlots",
    "composing_models",
    "is_ensemble",
    "plan_ensemble",
    "step_producers",
]
