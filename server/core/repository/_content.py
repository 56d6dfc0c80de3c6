"""What a loaded version's answers depend on, kept as the start of its response cache's keys:
for a model, its config and files (`content_digest`); for an ensemble, its config and the
content of its steps' loaded versions. A reload with other files or another config, or of a
step under an ensemble, then never answers from the entries of what it replaced."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path

from server.core.cache import ResponseCache, version_cache
from server.core.repository._directories import content_digest
from server.core.repository._models import ModelVersion
from server.core.serving.ensemble import composing_models, is_ensemble

# The loaded versions of a model by name (none when it is not loaded), in version order.
Loaded = Callable[[str], Iterable[ModelVersion]]


async def keep_content(
    version: ModelVersion, path: Path, loaded: Loaded, cache: ResponseCache | None
) -> None:
    """Set a freshly built version's content (when the server has a cache; a version kept
    from the load before has it already) and its response cache."""
    if cache is not None and not version.content:
        if is_ensemble(version.config):
            version.content = ensemble_content(version, loaded)
        else:
            config = version.config.SerializeToString(deterministic=True)
            version.content = await asyncio.to_thread(content_digest, path, version.version, config)
    version.cache = version_cache(cache, version.config, version.version, version.content)


def ensemble_content(version: ModelVersion, loaded: Loaded) -> bytes:
    digest = hashlib.sha256(version.config.SerializeToString(deterministic=True))
    for model in composing_models(version.config):
        for step in loaded(model):
            digest.update(f"{model}\0{step.version}\0".encode() + step.content)
    return digest.digest()


def refresh_ensembles(
    changed: str, versions: Iterable[ModelVersion], loaded: Loaded, cache: ResponseCache | None
) -> None:
    """After model `changed` was (re)loaded: the content and cache of the loaded ensemble
    versions among `versions` that use it."""
    if cache is None:
        return
    for version in versions:
        if is_ensemble(version.config) and changed in composing_models(version.config):
            version.content = ensemble_content(version, loaded)
            version.cache = version_cache(cache, version.config, version.version, version.content)
