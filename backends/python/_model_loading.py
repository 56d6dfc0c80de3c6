"""model.py's way in, in a worker process or in the server's own: Convoy's pb_utils loaded by path
as Triton's `triton_python_backend_utils`, model.py imported, its `auto_complete_config` and
`initialize` called. Runs in the worker too, so it imports only its siblings.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from ._contract import UTILS_MODULE, ContractError, describe, model_log

_MODEL_MODULE = "model"


def _load_sibling(module_name: str, file_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, Path(__file__).parent / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_utils(shared_dir: str | None = None) -> ModuleType:
    """A fresh copy of Convoy's pb_utils, loaded by path (no Convoy import), installed as
    `triton_python_backend_utils` for the model.py imported next: each in-process model has its
    own, so that its `exec` reaches its own instance; `shared_dir` is where its `shared_array`
    keeps the version's arrays. In the server's process its caller holds the import lock."""
    # A package: an earlier copy's modules go too, so that this copy imports (and holds) its own.
    for name in [name for name in sys.modules if name.startswith(f"{UTILS_MODULE}.")]:
        del sys.modules[name]
    module = _load_sibling(UTILS_MODULE, "pb_utils/__init__.py")
    module._install_shared_dir(shared_dir)  # where its shared_array keeps arrays
    return module


def model_class(spec: dict[str, Any], module_name: str = _MODEL_MODULE) -> type:
    """Import model.py by path as `module_name`; its TritonPythonModel, or ContractError with
    the reason. In a worker (`model`) its directory goes first on sys.path, as Triton's stub
    puts it; in the server's process last, so that it never shadows what the server imports."""
    model_path = Path(spec["model_path"])
    directory = str(model_path.parent)  # model.py may import modules beside it
    if module_name == _MODEL_MODULE:
        sys.path.insert(0, directory)
    elif directory not in sys.path:
        sys.path.append(directory)
    module_spec = importlib.util.spec_from_file_location(module_name, model_path)
    if module_spec is None or module_spec.loader is None:
        raise ContractError(f"'{model_path}' cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickle look the module up there
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        model_log().error("importing %s raised\n%s", model_path, traceback.format_exc())
        raise ContractError(f"importing '{model_path}' raised {describe(exc)}") from None
    model_class = getattr(module, "TritonPythonModel", None)
    if not isinstance(model_class, type):
        raise ContractError(f"'{model_path}' defines no class TritonPythonModel")
    return model_class


def initialize_model(spec: dict[str, Any], cls: type) -> Any:
    """A TritonPythonModel of `cls`, initialized with spec's args; raises ContractError."""
    try:
        model = cls()
        initialize = getattr(model, "initialize", None)
        if callable(initialize):
            initialize(spec["args"])
    except Exception as exc:
        model_log().error("initialize raised\n%s", traceback.format_exc())
        raise ContractError(f"initialize raised {describe(exc)}") from None
    return model


def auto_complete(spec: dict[str, Any], utils: ModuleType) -> dict[str, Any]:
    """The config after the model's `auto_complete_config` (as it was when there is none)."""
    config = utils.ModelConfig(json.loads(spec["args"]["model_config"]))
    complete = getattr(model_class(spec), "auto_complete_config", None)
    if not callable(complete):
        return dict(config.as_dict())
    try:
        completed = complete(config)
    except Exception as exc:
        model_log().error("auto_complete_config raised\n%s", traceback.format_exc())
        raise ContractError(f"auto_complete_config raised {describe(exc)}") from None
    if not isinstance(completed, utils.ModelConfig):
        raise ContractError(
            "auto_complete_config must return the pb_utils.ModelConfig it was given, not "
            f"{type(completed).__name__}"
        )
    return dict(completed.as_dict())
