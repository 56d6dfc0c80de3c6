"""One request through one model version: the view of a version the path reads (`Servable`),
`submit` to its scheduler, decoupled streams, ragged batches, reshape, and ensembles
(`ensemble`)."""

from server.core.serving.decoupled import DecoupledExecutor, DecoupledRouter
from server.core.serving.ragged import BatchInput, RaggedExecutor, RaggedPlan
from server.core.serving.reshape import Reshape
from server.core.serving.servable import Scheduler, Servable, Streamed, StreamRouter
from server.core.serving.submit import infer_on, model_caller, submit

__all__ = [
    "BatchInput",
    "DecoupledExecutor",
    "DecoupledRouter",
    "RaggedExecutor",
    "RaggedPlan",
    "Reshape",
    "Scheduler",
    "Servable",
    "StreamRouter",
    "Streamed",
    "infer_on",
    "model_caller",
    "submit",
]
