"""Class labels for the classification extension: an output's `label_filename`, a text file in
the model directory with one label per line, read when the model loads."""

from __future__ import annotations

import os
from pathlib import Path

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError


def read_labels(config: mc.ModelConfig, path: Path) -> dict[str, tuple[str, ...]]:
    """Each labelled output's labels (line i names class i); a file that cannot be read is a
    load error, as in Triton."""
    labels = {}
    for output in config.output:
        if not output.label_filename:
            continue
        relative = Path(output.label_filename)
        if relative.is_absolute() or ".." in relative.parts:
            raise ConfigError(
                f"model '{config.name}': label_filename '{output.label_filename}' of output "
                f"'{output.name}' must name a file inside the model directory"
            )
        try:
            text = (path / relative).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else exc
            raise ConfigError(
                f"model '{config.name}': failed to read label_filename "
                f"'{output.label_filename}' of output '{output.name}': {why}"
            ) from exc
        labels[output.name] = tuple(text.splitlines())
    return labels
