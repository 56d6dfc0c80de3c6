"""The model config as model code reads it (lookups in its dict) and completes it
(`ModelConfig`, for `auto_complete_config`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._errors import TritonModelException


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `input` entry called `name` of the model config dict (json.loads of the args)."""
    return next((i for i in model_config.get("input", ()) if i["name"] == name), None)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> Any:
    """The `output` entry called `name` of the model config dict."""
    return next((o for o in model_config.get("output", ()) if o["name"] == name), None)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy", {})
    return bool(policy.get("decoupled", False))


class ModelConfig:
    """The config `TritonPythonModel.auto_complete_config` receives and completes (Triton's
    names): a dict as `args['model_config']` holds it, changed through the methods below."""

    def __init__(self, model_config: Mapping[str, Any]) -> None:
        # A deep copy of plain data.
        self._config: dict[str, Any] = json.loads(json.dumps(dict(model_config)))

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current not in (0, max_batch_size):
            raise TritonModelException(
                f"max_batch_size is {current} in the config; auto_complete_config cannot set "
                f"{max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        scheduling = ("sequence_batching", "ensemble_scheduling")
        if any(self._config.get(key) for key in scheduling):
            raise TritonModelException("the config already has another scheduler")
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: Mapping[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_input(self, input: Mapping[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: Mapping[str, Any]) -> None:
        self._add("output", output)

    def _add(self, side: str, tensor: Mapping[str, Any]) -> None:
        """Add a tensor, or check it against the one the config already declares."""
        missing = [key for key in ("name", "data_type", "dims") if key not in tensor]
        if missing:
            raise TritonModelException(f"{side} {dict(tensor)} lacks {missing}")
        declared = {t.get("name"): t for t in self._config.setdefault(side, [])}
        found = declared.get(tensor["name"])
        if found is None:
            entry = {**tensor, "dims": [int(d) for d in tensor["dims"]]}
            self._config[side].append(entry)
            return
        same_type = found.get("data_type") == tensor["data_type"]
        same_dims = [int(d) for d in found.get("dims", [])] == [int(d) for d in tensor["dims"]]
        if not (same_type and same_dims):
            raise TritonModelException(
                f"{side} '{tensor['name']}' is {tensor['data_type']} {list(tensor['dims'])} "
                f"here, but {found.get('data_type')} {found.get('dims')} in the config"
            )
