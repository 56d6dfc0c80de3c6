"""How model code asks the server outside a request: the ask the worker installs, and through it
the model loading API (`load_model`, `unload_model`, `is_model_ready`)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from ._errors import TritonModelException

# How custom metrics (`MetricFamily`) and the model loading API (`load_model`...) reach the
# server: installed by the worker, a function that takes one request (a dict of plain values)
# and whether its answer is awaited, and answers {"value": ...} or {"error": message} (anything
# when it is not awaited); None where no server is behind the package (tests).
ServerAsk = Callable[[dict[str, Any], bool], dict[str, Any]]
_server_ask: ServerAsk | None = None


def _install_server_ask(ask: ServerAsk) -> None:
    global _server_ask
    _server_ask = ask


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """The model loading API: whether a model (a version of it, or its newest) serves."""
    request = {"op": "is_model_ready", "model": model_name, "version": str(model_version)}
    return bool(_ask_server(request))


def load_model(model_name: str, config: str = "", files: Mapping[str, bytes] | None = None) -> None:
    """The model loading API (the server in explicit model control mode): load a model, or load
    it again; `config` (JSON) replaces its config.pbtxt, and `files` ("file:<version>/<name>" ->
    bytes, with `config`) its directory. Returns once it serves; raises when it cannot."""
    encoded = {path: base64.b64encode(bytes(data)).decode() for path, data in (files or {}).items()}
    _ask_server({"op": "load_model", "model": model_name, "config": config, "files": encoded})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """The model loading API: unload a model (and, with `unload_dependents`, the ensembles
    that use it)."""
    request = {"op": "unload_model", "model": model_name, "dependents": unload_dependents}
    _ask_server(request)


def _ask_server(request: dict[str, Any]) -> Any:
    """The server's answer to a request, its error raised."""
    answer = _ask()(request, True)
    if "error" in answer:
        raise TritonModelException(str(answer["error"]))
    return answer.get("value")


def _update_metrics(request: dict[str, Any]) -> None:
    """An update the server carries out without answering (`Metric` checked it)."""
    _ask()(request, False)


def _ask() -> ServerAsk:
    if _server_ask is None:
        raise TritonModelException("this works only inside a model that Convoy serves")
    return _server_ask
