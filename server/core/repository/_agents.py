"""Triton's repository agents (`model_repository_agents`), as far as Convoy has them: the
`checksum` agent checks a model's files against the digests its config gives before the model
loads. Any other agent fails the load, as in a Triton that lacks that agent's library: a model
that asks for decryption or verification must not load without it."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError

CHECKSUM_AGENT = "checksum"
# Triton's agent takes MD5; the others hashlib has are taken too.
_ALGORITHMS = ("MD5", "SHA1", "SHA224", "SHA256", "SHA384", "SHA512")
_CHUNK_BYTES = 1 << 20


def run_agents(config: mc.ModelConfig, model_dir: Path) -> None:
    """Run the config's agents in order over `model_dir`; ConfigError when one refuses the
    model or is not there. Reads whole files: call it off the event loop."""
    for agent in config.model_repository_agents.agents:
        if agent.name != CHECKSUM_AGENT:
            raise ConfigError(
                f"model '{config.name}': repository agent '{agent.name}' is not available "
                f"(Convoy's: '{CHECKSUM_AGENT}')"
            )
        for key, expected in agent.parameters.items():
            _check_file(config.name, model_dir, key, expected)


def _check_file(model: str, model_dir: Path, key: str, expected: str) -> None:
    algorithm, _, relative = key.partition(":")
    if algorithm.upper() not in _ALGORITHMS or not relative:
        raise ConfigError(
            f"model '{model}': checksum agent parameter '{key}' must be ALGORITHM:path/in/model "
            f"(ALGORITHM one of {', '.join(_ALGORITHMS)})"
        )
    root = model_dir.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise ConfigError(
            f"model '{model}': checksum agent parameter '{key}' names a file outside the model"
        )
    digest = hashlib.new(algorithm.lower())
    try:
        with path.open("rb") as file:
            while chunk := file.read(_CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigError(
            f"model '{model}': the checksum agent cannot read '{relative}': {exc.strerror}"
        ) from None
    if not hmac.compare_digest(digest.hexdigest(), expected.strip().lower()):
        raise ConfigError(
            f"model '{model}': the {algorithm.upper()} checksum of '{relative}' is "
            f"{digest.hexdigest()}, not the {expected.strip()} its config expects"
        )
