"""Reading config.pbtxt (protobuf text format) into the compiled `ModelConfig`."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError

CONFIG_FILENAME = "config.pbtxt"


def read_config(model_dir: Path, config_name: str | None = None) -> mc.ModelConfig | None:
    """The parsed config of a model directory, or None when it has no config.pbtxt. With a
    `config_name` (Triton's --model-config-name), `configs/<name>.pbtxt` is read instead where
    the model has one."""
    path = model_dir / CONFIG_FILENAME
    if config_name is not None and (model_dir / "configs" / f"{config_name}.pbtxt").is_file():
        path = model_dir / "configs" / f"{config_name}.pbtxt"
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read '{path}': {exc}") from exc
    return parse_config(text, str(path))


def parse_config(text: str, origin: str) -> mc.ModelConfig:
    """Parse config text; a typo or unknown field names the origin, line and column."""
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = str(exc)
        # ParseError's text starts with "line:column : "; keep only what follows.
        prefix = f"{line}:{column} : "
        detail = detail.removeprefix(prefix)
        raise ConfigError(f"{origin}: line {line}, column {column}: {detail}") from exc
