"""One model's sweep: each configuration loaded through the server's repository and measured
at each concurrency in process, then (optionally) the running server at `url` over gRPC."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from proto import model_config_pb2 as mc
from server.core.repository import Repository
from server.tools._inputs import sample_inputs
from server.tools.profile._local import load, measure_local
from server.tools.profile._loop import Window
from server.tools.profile._points import Point
from server.tools.profile._remote import measure_remote
from server.tools.profile._space import Variant, apply

WARMUP_SHARE = 0.2  # of each point's time, before its window opens
MIN_WINDOW_S = 0.5  # below this a window holds too few requests of a slow model


@dataclass(frozen=True, slots=True)
class Plan:
    """What one model's sweep measures, and for how long each point."""

    model: str
    raw: mc.ModelConfig  # the user's config as written (empty without a config.pbtxt)
    variants: Sequence[Variant]
    concurrency: Sequence[int]
    url: str | None  # a running server to measure too, at the same concurrency levels
    window: Window

    @property
    def point_count(self) -> int:
        return len(self.concurrency) * (len(self.variants) + (1 if self.url else 0))


def window_for(budget_s: float, points: int) -> Window:
    """Each point's share of the time budget."""
    total_s = max(budget_s / max(points, 1), MIN_WINDOW_S / (1 - WARMUP_SHARE))
    return Window(total_s * WARMUP_SHARE, total_s * (1 - WARMUP_SHARE))


class Progress(Protocol):
    """Where a sweep reports what it does (a progress bar per configuration, with its ETA)."""

    def begin(self, label: str, seconds: float) -> None: ...

    def advance(self, seconds: float) -> None: ...

    def end(self) -> None: ...


async def sweep(repository: Repository, plan: Plan, progress: Progress) -> list[Point]:
    points: list[Point] = []
    per_curve_s = plan.window.total_s * len(plan.concurrency)
    for variant in plan.variants:
        progress.begin(f"{plan.model}: {variant.label}", per_curve_s)
        version = await load(repository, plan.model, apply(plan.raw, variant))
        inputs = sample_inputs(version.config, 1)
        for concurrency in plan.concurrency:
            points.append(
                await measure_local(
                    version, variant, inputs, concurrency, plan.window, progress.advance
                )
            )
        progress.end()
    await repository.unload(plan.model)
    if plan.url:
        progress.begin(f"{plan.model}: {plan.url} over gRPC", per_curve_s)
        for concurrency in plan.concurrency:
            points.append(
                await measure_remote(
                    plan.url, plan.model, concurrency, plan.window, progress.advance
                )
            )
        progress.end()
    return points
