"""Ensembles: a DAG of composing models served as one model (Triton's ensemble scheduling)."""

from server.core.serving.ensemble._plan import (
    ENSEMBLE_PLATFORM,
    EnsemblePlan,
    Step,
    composing_models,
    is_ensemble,
    plan_ensemble,
)
from server.core.serving.ensemble._scheduler import EnsembleResult, EnsembleScheduler, StepRun

__all__ = [
    "ENSEMBLE_PLATFORM",
    "EnsemblePlan",
    "EnsembleResult",
    "EnsembleScheduler",
    "Step",
    "StepRun",
    "composing_models",
    "is_ensemble",
    "plan_ensemble",
]
