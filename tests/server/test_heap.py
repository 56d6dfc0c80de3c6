"""The heap freezer: the server's long-lived objects frozen out of the collector's passes, and
given back to it (and what became garbage in cycles reclaimed) when the loaded models change;
the repository's count of those changes."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

from onnx import TensorProto

from scripts import models
from server.core.heap import HeapFreezer
from server.core.repository import Repository


class _Node:
    """An object that can sit in a reference cycle and be watched through a weak reference."""

    def __init__(self) -> None:
        self.me = self


def test_the_heap_is_frozen_at_start_and_cycles_freed_after_a_change() -> None:
    changes = [0]

    async def scenario() -> None:
        held = [_Node()]
        watched = weakref.ref(held[0])
        freezer = HeapFreezer(lambda: changes[0], check_s=0.01)
        freezer.start()
        try:
            assert gc.get_freeze_count() > 0
            held.clear()  # now garbage, in a cycle, but frozen: no pass looks at it
            gc.collect()
            assert watched() is not None
            changes[0] += 1  # the loaded models changed: unfrozen, collected, frozen again
            for _ in range(100):
                await asyncio.sleep(0.01)
                if watched() is None:
                    break
            assert watched() is None
            assert gc.get_freeze_count() > 0
        finally:
            await freezer.stop()
        assert gc.get_freeze_count() == 0

    asyncio.run(scenario())


def test_the_repository_counts_each_change_of_the_loaded_models(tmp_path: Path) -> None:
    config = models.identity_config("m", TensorProto.FLOAT)
    models.write_model(tmp_path, "m", models.identity(TensorProto.FLOAT), config)
    repository = Repository([tmp_path])

    async def scenario() -> list[int]:
        seen = [repository.changes]
        await repository.load("m")
        seen.append(repository.changes)
        changed = models.identity_config("m", TensorProto.FLOAT, max_batch_size=4)
        (tmp_path / "m" / "config.pbtxt").write_text(changed, encoding="utf-8")
        await repository.load("m")  # a reload: the new version in service, the old one unloaded
        for _ in range(500):  # the old version unloads in the background
            if repository.changes == seen[-1] + 2:
                break
            await asyncio.sleep(0.01)
        seen.append(repository.changes)
        await repository.unload("m")
        seen.append(repository.changes)
        await repository.unload("m")  # not loaded: nothing changes
        seen.append(repository.changes)
        return seen

    assert asyncio.run(scenario()) == [0, 1, 3, 4, 4]
