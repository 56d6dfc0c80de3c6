"""Convoy's admission families: per model version, the requests the scheduler did not run for
the caller's sake (dropped at their deadline, refused to keep the latency target). Triton's
nv_inference_request_failure counts them as well, under its own reasons."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.metrics_core import Metric

from server.core.repository import ModelVersion


def admission_families(versions: Sequence[ModelVersion]) -> Iterator[Metric]:
    expired = Metric(
        "convoy_inference_deadline_exceeded",
        "Requests that reached their deadline before they ran and were never executed "
        "(Convoy's addition)",
        "counter",
    )
    refused = Metric(
        "convoy_inference_latency_target_refused",
        "Requests refused on arrival because the predicted wait and compute exceeded the "
        "model's convoy_latency_target_ms (Convoy's addition)",
        "counter",
    )
    for version in versions:
        labels = {"model": version.name, "version": str(version.version)}
        expired.add_sample(expired.name, labels, version.stats.deadline_exceeded)
        refused.add_sample(refused.name, labels, version.stats.target_refused)
    yield expired
    yield refused
