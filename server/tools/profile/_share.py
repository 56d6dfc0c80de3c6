"""Several models on one machine: each at its recommended configuration and concurrency, all
loaded in one repository and measured at once, against what each did alone in its sweep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proto import model_config_pb2 as mc
from server.core.repository import Repository
from server.tools._inputs import sample_inputs
from server.tools.profile._choose import Choice
from server.tools.profile._local import load, measure_local
from server.tools.profile._loop import Window
from server.tools.profile._points import Point
from server.tools.profile._space import apply


@dataclass(frozen=True, slots=True)
class Shared:
    """One model's share of the machine."""

    model: str
    memory_bytes: int  # the server's estimate for its loaded version (as the budget counts)
    alone: Point  # its recommended point, measured alone in its sweep
    together: Point  # the same configuration and concurrency, with every other model busy

    @property
    def kept(self) -> float:
        """The share of its own throughput it keeps beside the others."""
        return self.together.infer_per_s / self.alone.infer_per_s if self.alone.infer_per_s else 0


async def share(
    repository: Repository,
    chosen: Sequence[tuple[str, mc.ModelConfig, Choice]],
    window: Window,
    advance: Callable[[float], None],
) -> list[Shared]:
    """Load every (model, the user's config, its choice) as recommended, then measure them all
    at once for one window."""
    versions = []
    for name, raw, choice in chosen:
        versions.append(await load(repository, name, apply(raw, choice.point.variant)))
    steps = [advance] + [lambda _s: None] * (len(chosen) - 1)  # one progress bar for all
    together = await asyncio.gather(
        *(
            measure_local(
                version,
                choice.point.variant,
                sample_inputs(version.config, 1),
                choice.point.concurrency,
                window,
                step,
            )
            for version, (_, _, choice), step in zip(versions, chosen, steps, strict=True)
        )
    )
    return [
        Shared(name, version.memory_bytes, choice.point, point)
        for (name, _, choice), version, point in zip(chosen, versions, together, strict=True)
    ]
