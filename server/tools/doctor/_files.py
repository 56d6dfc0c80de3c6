"""The model directory's layout: version directories the server would skip, and links that
poll mode cannot see through (the seed's "hot reload not working")."""

from __future__ import annotations

import re

from server.core.repository import is_version_name
from server.tools.doctor._examined import Examined
from server.tools.doctor._findings import Check, Severity

CONFIG_FILENAME = "config.pbtxt"
# Directories the server reads that are not versions: model_warmup's input_data_file folder.
NOT_VERSIONS = frozenset({"warmup"})


def check_directories(examined: Examined) -> None:
    path = examined.path
    for child in sorted(path.iterdir()):
        if not child.is_dir() or child.name in NOT_VERSIONS or is_version_name(child.name):
            continue
        digits = re.sub(r"\D", "", child.name).lstrip("0")
        rename = f"rename it to '{digits}'" if digits else "rename it to a number such as '1'"
        examined.add(
            Severity.WARNING,
            Check.VERSIONS,
            f"model '{examined.name}': directory '{child.name}' is not a version number, so "
            "the server ignores it (version directories are positive integers without leading "
            "zeros)",
            child,
            f"{rename}, or move it out of the model directory",
        )
    for item in sorted(path.rglob("*")):
        if item.is_symlink() and item.is_dir():
            examined.add(
                Severity.WARNING,
                Check.HOT_RELOAD,
                f"model '{examined.name}': '{item.relative_to(path)}' is a link to a directory; "
                "poll mode (--model-control-mode poll) sees the link, not the files behind it, so "
                "a model file replaced there, or the link moved to another directory, is not "
                "reloaded",
                item,
                "copy the files into the model directory (a new numbered version directory for "
                "each new model), or reload it through the model control API (explicit mode)",
            )
