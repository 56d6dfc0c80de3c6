"""Convoy's keep-alive families: per model, how often it was unloaded after idling and how often
(and how long) a request had to load it again (a cold start, after an idle unload or an
eviction). Only models that had either appear."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

from server.core.repository import ModelEntry


def keep_alive_families(entries: Iterable[ModelEntry]) -> Iterator[Metric]:
    touched = [e for e in entries if e.idle_unloads or e.cold_starts]
    if not touched:
        return
    unloads = Metric(
        "convoy_model_idle_unloads",
        "Times the model was unloaded after idling past its keep-alive (Convoy's addition)",
        "counter",
    )
    starts = Metric(
        "convoy_model_cold_starts",
        "Times a request loaded the model again after an idle unload or an eviction "
        "(Convoy's addition)",
        "counter",
    )
    duration = Metric(
        "convoy_model_cold_start_duration_us",
        "Cumulative time those loads took, in microseconds (Convoy's addition)",
        "counter",
    )
    for entry in touched:
        labels = {"model": entry.name}
        unloads.add_sample(unloads.name, labels, entry.idle_unloads)
        starts.add_sample(starts.name, labels, entry.cold_starts)
        duration.add_sample(duration.name, labels, entry.cold_start_ns // 1000)
    yield unloads
    yield starts
    yield duration
