"""What a model's load may carry besides its name, as the repository API (and a Python model's
`pb_utils.load_model`) sends it: a config that replaces config.pbtxt, as JSON, and files that
replace the model's directory, keyed `file:<path>`."""

from __future__ import annotations

from google.protobuf import json_format

from proto import model_config_pb2 as mc
from server.contract.errors import LOAD_NOT_POLLED

FILE_PREFIX = "file:"


def config_override(model: str, text: str) -> mc.ModelConfig:
    """The config a load's `config` (JSON) names; Triton's refusal when it is not one."""
    try:
        return json_format.Parse(text, mc.ModelConfig())
    except json_format.ParseError as exc:
        raise LOAD_NOT_POLLED(model=model, reason=f"Invalid config override: {exc}") from exc
