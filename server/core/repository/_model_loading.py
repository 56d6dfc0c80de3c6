"""The Python backend's model loading API (`pb_utils.load_model`, `unload_model`,
`is_model_ready`, as in Triton): a model's request, answered by the repository on the event loop,
and the blocking form a model's threads call it through."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from backends import BackendError
from batching import BatchingError
from proto import model_config_pb2 as mc
from server.contract.errors import LOAD_NOT_POLLED, ModelControlDisabledError, ServerError
from server.contract.model_load import FILE_PREFIX, config_override

# A model's request -> {"value": ...} or {"error": message}.
Answer = Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


class Models(Protocol):
    """What the API asks of the repository."""

    def is_ready(self, name: str, version: str = "") -> bool: ...

    async def load(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool = False) -> None: ...


async def answer(repository: Models, explicit: bool, request: dict[str, Any]) -> dict[str, Any]:
    """One request of a model; `explicit`: the server is in explicit model control mode, which
    loading and unloading need (as the repository API's)."""
    try:
        return {"value": await _carry_out(repository, explicit, request)}
    except (ServerError, BackendError, BatchingError) as exc:
        return {"error": str(exc)}


async def _carry_out(repository: Models, explicit: bool, request: dict[str, Any]) -> Any:
    op, model = request.get("op"), str(request.get("model", ""))
    if op == "is_model_ready":
        return repository.is_ready(model, str(request.get("version", "")))
    if not explicit:
        raise ModelControlDisabledError()
    if op == "unload_model":
        await repository.unload(model, unload_dependents=bool(request.get("dependents")))
        return None
    if op != "load_model":
        raise LOAD_NOT_POLLED(model=model, reason=f"unknown request {op!r}")
    config = str(request.get("config") or "")
    override = config_override(model, config) if config else None
    files = {}
    for path, encoded in dict(request.get("files") or {}).items():
        if not str(path).startswith(FILE_PREFIX):
            reason = f"a file's key must be '{FILE_PREFIX}<path>': {path}"
            raise LOAD_NOT_POLLED(model=model, reason=reason)
        try:
            data = base64.b64decode(str(encoded), validate=True)
        except binascii.Error as exc:
            raise LOAD_NOT_POLLED(model=model, reason=f"file '{path}' is not base64") from exc
        files[str(path).removeprefix(FILE_PREFIX)] = data
    await repository.load(model, override, files)
    return None


def from_thread(
    answer: Answer, loop: asyncio.AbstractEventLoop
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`answer` for a model's threads: each request runs on `loop`, the caller waits for it."""

    def blocking(request: dict[str, Any]) -> dict[str, Any]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # waiting here would block the loop the answer needs
            return {"error": "the model loading API cannot be called on the server's event loop"}
        return asyncio.run_coroutine_threadsafe(answer(request), loop).result()

    return blocking
