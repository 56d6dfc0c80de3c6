"""The sweep's table, and the recommended config.pbtxt: the user's own config with only the
fields the recommendation changes, the measured figures as comments above it."""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.protobuf import text_format

from proto import model_config_pb2 as mc
from server.tools._measured import measured_line
from server.tools.profile._choose import Choice
from server.tools.profile._points import Point
from server.tools.profile._space import KEEP, Variant, apply

COLUMNS = (
    "configuration", "where", "conc", "infer/s", "p50 ms", "p95 ms", "p99 ms", "avg batch",
    "CPU %", "GPU %",
)  # fmt: skip


def rows(points: Sequence[Point], choice: Choice | None) -> list[tuple[str, ...]]:
    """One row per point (the chosen one marked with *), in the order measured."""
    return [
        (
            ("* " if choice is not None and point is choice.point else "") + point.variant.label,
            point.where,
            str(point.concurrency),
            f"{point.infer_per_s:.1f}",
            f"{point.p50_ms:.2f}",
            f"{point.p95_ms:.2f}",
            f"{point.p99_ms:.2f}",
            f"{point.average_batch:.2f}" if point.average_batch else "-",
            "-" if point.cpu_percent is None else f"{point.cpu_percent:.0f}",
            "-" if point.gpu_percent is None else f"{point.gpu_percent:.0f}",
        )
        for point in points
    ]


def changes(raw: mc.ModelConfig, variant: Variant) -> list[str]:
    """The fields a variant sets to a value other than the user's, as config.pbtxt spells them."""
    batching = raw.dynamic_batching
    named = (
        ("instance_group count", variant.instances, {g.count for g in raw.instance_group}),
        ("max_batch_size", variant.max_batch_size, {raw.max_batch_size}),
        ("dynamic_batching preferred_batch_size", variant.preferred_batch_size, _preferred(raw)),
        (
            "dynamic_batching max_queue_delay_microseconds",
            variant.max_queue_delay_us,
            {batching.max_queue_delay_microseconds},
        ),
    )
    return [
        f"{name}: {value}" for name, value, before in named if value != KEEP and {value} != before
    ]


def _preferred(raw: mc.ModelConfig) -> set[object]:
    """The user's preferred sizes as a variant spells one: 0 for none, the size for one."""
    sizes = tuple(raw.dynamic_batching.preferred_batch_size)
    return {sizes[0] if len(sizes) == 1 else sizes or 0}


def summary(choice: Choice, latency_p99_ms: float | None) -> str:
    point = choice.point
    if latency_p99_ms is None:
        goal = "the most infer/s (no --latency-p99-ms objective)"
    elif choice.meets_objective:
        goal = f"the most infer/s with p99 <= {latency_p99_ms:g} ms"
    else:
        goal = f"no configuration met p99 <= {latency_p99_ms:g} ms: this one has the lowest p99"
    return (
        f"{goal}: {point.variant.label} at concurrency {point.concurrency}: "
        f"{point.infer_per_s:.1f} infer/s, p50 {point.p50_ms:.2f} ms, p95 {point.p95_ms:.2f} ms, "
        f"p99 {point.p99_ms:.2f} ms, average batch {point.average_batch:.2f}"
    )


TARGET_HEADROOM = 1.25  # a recommended latency target over the p99 measured, for the noise


def latency_target_ms(choice: Choice, latency_p99_ms: float | None) -> int:
    """The convoy_latency_target_ms to serve the chosen configuration with: the objective when
    it was met, else the p99 measured with some headroom (whole ms, at least 1)."""
    if latency_p99_ms is not None and choice.meets_objective:
        return max(math.ceil(latency_p99_ms), 1)
    return max(math.ceil(choice.point.p99_ms * TARGET_HEADROOM), 1)


def recommended_config(
    raw: mc.ModelConfig, choice: Choice, latency_p99_ms: float | None, measured_on: str
) -> str:
    """config.pbtxt text: `raw` (the user's config as written) with the chosen variant applied,
    and comment lines with what was measured (doctor reads the execution line back)."""
    lines = [
        f"# convoy profile: {summary(choice, latency_p99_ms)}",
        f"# convoy profile: measured {measured_on}, requests of batch 1",
        "# convoy profile: changed " + ("; ".join(changes(raw, choice.point.variant)) or "nothing"),
    ]
    if choice.point.execution is not None:
        lines.append(measured_line(choice.point.execution))
    if apply(raw, choice.point.variant).HasField("dynamic_batching"):
        target_ms = latency_target_ms(choice, latency_p99_ms)
        lines.append(
            f"# convoy profile: a latency target this configuration keeps (p99 measured "
            f'{choice.point.p99_ms:.2f} ms): parameters {{ key: "convoy_latency_target_ms" '
            f'value: {{ string_value: "{target_ms}" }} }}'
        )
    body = text_format.MessageToString(apply(raw, choice.point.variant))
    return "\n".join(lines) + "\n" + body
