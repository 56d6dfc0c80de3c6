"""Keep-alive in explicit model control (--model-keep-alive, per model convoy_keep_alive_s): a
model idle that long is unloaded, and the next request loads it again. The rules are pure
(`keep_alive_of`, `due`); `KeepAlive` is the loop that applies them to a repository."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository._models import ModelEntry

_log = logging.getLogger(__name__)

KEEP_ALIVE_PARAMETER = "convoy_keep_alive_s"
TICK_S = 0.25  # how often idle models are looked for


def keep_alive_of(config: mc.ModelConfig, default_s: float) -> float:
    """A model's keep-alive in seconds: its convoy_keep_alive_s, else the server's; 0 keeps it
    loaded. A value that is not a number >= 0 is a config error."""
    if KEEP_ALIVE_PARAMETER not in config.parameters:  # indexing would insert the key
        return default_s
    text = config.parameters[KEEP_ALIVE_PARAMETER].string_value.strip()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(
            f"model '{config.name}': {KEEP_ALIVE_PARAMETER} must be a number of seconds >= 0 "
            f"(0 keeps the model loaded), got '{text}'"
        )
    return value


def due(last_used_ms: int, now_ms: int, keep_alive_s: float) -> bool:
    """Whether a model last used at `last_used_ms` has been idle past its keep-alive."""
    return keep_alive_s > 0 and now_ms - last_used_ms >= keep_alive_s * 1000


class KeepAlive:
    """Unloads, every tick, the idle ready models past their keep-alive (`unload` is the
    repository's eviction); started and stopped by the server."""

    def __init__(
        self,
        entries: Callable[[], Iterable[ModelEntry]],
        unload: Callable[[ModelEntry, float], Awaitable[None]],
        default_s: float,
        in_use: Callable[[], set[str]],
    ) -> None:
        self._entries = entries
        self._unload = unload
        self._default_s = default_s
        self._in_use = in_use  # models an ensemble uses: never unloaded under it
        self._task: asyncio.Task[None] | None = None

    def idle_past(self, now_ms: int) -> list[tuple[ModelEntry, float]]:
        """The models to unload now, with their keep-alive."""
        chosen = []
        in_use = self._in_use()
        for entry in self._entries():
            config = entry.config
            if not entry.ready or config is None or entry.name in in_use:
                continue
            if config.platform == "ensemble":  # holds no memory of its own
                continue
            keep_s = keep_alive_of(config, self._default_s)
            if entry.idle and due(entry.last_used_ms, now_ms, keep_s):
                chosen.append((entry, keep_s))
        return chosen

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="keep-alive")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            for entry, keep_s in self.idle_past(time.time_ns() // 1_000_000):
                try:
                    await self._unload(entry, keep_s)
                except Exception:  # one model's unload never stops the others'
                    _log.exception("keep-alive: unloading model '%s' failed", entry.name)
