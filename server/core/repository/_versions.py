"""Version directories and version policies (latest N, all, specific)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from proto import model_config_pb2 as mc
from server.contract.errors import VERSION_NEGATIVE, VERSION_NOT_A_NUMBER, ConfigError
from server.contract.numbers import is_digits

_log = logging.getLogger(__name__)


def list_versions(model_dir: Path) -> list[int]:
    """The numeric version directories of a model, ascending; anything else is skipped."""
    versions = []
    for child in sorted(model_dir.iterdir()):
        if not child.is_dir():
            continue
        if is_version_name(child.name):
            versions.append(int(child.name))
        else:
            _log.warning(
                "model '%s': ignoring directory '%s' (version directories are positive "
                "integers without leading zeros)",
                model_dir.name,
                child.name,
            )
    return sorted(versions)


def is_version_name(name: str) -> bool:
    """Whether a directory name is a version: a positive integer without leading zeros."""
    return is_digits(name) and not name.startswith("0")


def select_versions(
    model: str, policy: mc.ModelVersionPolicy, available: Sequence[int]
) -> list[int]:
    """The versions a policy asks to serve; `specific` may name versions that are missing."""
    choice = policy.WhichOneof("policy_choice")
    if choice is None:
        return sorted(available)[-1:]
    if choice == "latest":
        count = policy.latest.num_versions
        if count < 1:
            raise ConfigError(
                f"model '{model}': version_policy latest needs num_versions >= 1, got {count}"
            )
        return sorted(available)[-count:]
    if choice == "all":
        return sorted(available)
    return sorted(set(policy.specific.versions))


def parse_version(version: str) -> int:
    """A request's model_version string as a number: ASCII digits, as Triton's grammar has
    them (int() alone would take spaces, underscores, '+' and other scripts' digits)."""
    digits = version[1:] if version.startswith("-") else version
    if not is_digits(digits):
        raise VERSION_NOT_A_NUMBER(version=version)
    if version.startswith("-"):
        raise VERSION_NEGATIVE(version=version)
    return int(version)
