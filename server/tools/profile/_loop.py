"""The closed loop both sides measure with: `concurrency` tasks, each sending its next request
as soon as its last one is answered (perf_analyzer's concurrency mode), a warm-up, then one
window whose completions count."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

TICK_S = 0.1  # how often the progress bar moves


@dataclass(frozen=True, slots=True)
class Window:
    """How long one point runs: warm-up first (not counted), then the measured window."""

    warmup_s: float
    measure_s: float

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.measure_s


@dataclass(slots=True)
class Completed:
    """The requests answered inside the measured window, and what the hooks saw at its edges."""

    latencies_ns: list[int] = field(default_factory=list)
    window_s: float = 0.0
    failures: int = 0  # requests refused or failed (any time in the run)


async def closed_loop(
    call: Callable[[], Awaitable[object]],
    concurrency: int,
    window: Window,
    on_edge: Callable[[bool], Awaitable[None]],
    advance: Callable[[float], None],
) -> Completed:
    """Run `call` from `concurrency` tasks for the window; `on_edge(True)` runs when the
    measured window opens and `on_edge(False)` when it closes (snapshots of counters);
    `advance(seconds)` moves a progress bar."""
    completed = Completed()
    start_ns = time.monotonic_ns()
    open_ns = start_ns + int(window.warmup_s * 1e9)
    close_ns = open_ns + int(window.measure_s * 1e9)

    async def client() -> None:
        while (sent_ns := time.monotonic_ns()) < close_ns:
            try:
                await call()
            except Exception:  # a refusal or failure counts; the loop measures on
                completed.failures += 1
                continue
            done_ns = time.monotonic_ns()
            if open_ns <= done_ns <= close_ns:
                completed.latencies_ns.append(done_ns - sent_ns)

    async def edges() -> None:
        await _until(open_ns, advance)
        await on_edge(True)
        await _until(close_ns, advance)
        await on_edge(False)

    clients = [asyncio.create_task(client()) for _ in range(concurrency)]
    await edges()
    await asyncio.gather(*clients)
    completed.window_s = (close_ns - open_ns) / 1e9
    return completed


async def _until(deadline_ns: int, advance: Callable[[float], None]) -> None:
    """Sleep until `deadline_ns`, moving the bar by the time that really passed (a busy
    loop wakes late), never past the deadline."""
    last_ns = time.monotonic_ns()
    while last_ns < deadline_ns:
        await asyncio.sleep(min(TICK_S, (deadline_ns - last_ns) / 1e9))
        now_ns = min(time.monotonic_ns(), deadline_ns)
        advance((now_ns - last_ns) / 1e9)
        last_ns = now_ns
