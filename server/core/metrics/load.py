"""The server's load, for autoscaling: per model version, the requests in flight (queued or
executing), what its instances can run at once and whether its batches wait for batch-mates on
a saturated event loop (natural batching); and `convoy_load_ratio`, the most loaded version's
in flight over its capacity, which idle models beside a busy one cannot pull down.

Ensembles are left out: their requests run, and are counted, on the composing models.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric

from server.contract.load import LoadReport
from server.core.repository import ModelVersion


def capacity(version: ModelVersion) -> int:
    """Requests the version's instances run at once: instances x max batch size (at least 1)."""
    return len(version.instances) * max(1, version.config.max_batch_size)


def load_ratio(parts: Iterable[tuple[int, int]]) -> float:
    """The largest in-flight / capacity over (in flight, capacity) pairs; 0.0 with none."""
    return max((in_flight / room for in_flight, room in parts if room > 0), default=0.0)


def load_report(version: ModelVersion, versions: Iterable[ModelVersion]) -> LoadReport:
    """What a response reports of its version's load (`endpoint-load-metrics`): its queue and
    requests in flight, and the server's ratio over `versions` (the loaded ones)."""
    ratio = load_ratio((v.scheduler.in_flight, capacity(v)) for v in versions if v.instances)
    return LoadReport(version.scheduler.queue_depth, version.scheduler.in_flight, ratio)


def load_families(versions: Iterable[ModelVersion]) -> Iterator[Metric]:
    """`convoy_inference_inflight_requests`, `convoy_inference_capacity`,
    `convoy_natural_batching` and `convoy_delay_waited_out` per version, and the server's
    `convoy_load_ratio`."""
    served = [(v, v.scheduler.in_flight, capacity(v)) for v in versions if v.instances]
    in_flight = Metric(
        "convoy_inference_inflight_requests",
        "Requests accepted and not yet answered: queued or executing (Convoy's addition)",
        "gauge",
    )
    room = Metric(
        "convoy_inference_capacity",
        "Requests the instances run at once: instances x max(1, max_batch_size) "
        "(Convoy's addition)",
        "gauge",
    )
    natural = Metric(
        "convoy_natural_batching",
        "1 while the version's batches, without a queue delay, wait for batch-mates because the "
        "event loop is saturated (natural batching; Convoy's addition)",
        "gauge",
    )
    waited_out = Metric(
        "convoy_delay_waited_out",
        "1 while the version's adaptive delay waits out the whole queue delay because batches "
        "still grow at its end on a busy event loop (Convoy's addition)",
        "gauge",
    )
    for version, count, size in served:
        labels = {"model": version.name, "version": str(version.version)}
        in_flight.add_sample(in_flight.name, labels, count)
        room.add_sample(room.name, labels, size)
        natural.add_sample(natural.name, labels, int(version.scheduler.waits_for_batch_mates))
        waited_out.add_sample(waited_out.name, labels, int(version.scheduler.waits_out_delay))
    ratio = Metric(
        "convoy_load_ratio",
        "Largest in-flight requests / capacity over the loaded model versions; above 1, "
        "requests wait for an instance (Convoy's addition)",
        "gauge",
    )
    ratio.add_sample(ratio.name, {}, load_ratio((count, size) for _, count, size in served))
    yield from (in_flight, room, natural, waited_out, ratio)
