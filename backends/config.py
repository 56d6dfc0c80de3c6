"""What every backend reads from a model config: its `parameters` as typed settings (one wording
for a bad value, naming the model and the key) and how many instances its groups run."""

from __future__ import annotations

from collections.abc import Mapping

from backends.errors import ModelLoadError
from proto import model_config_pb2 as mc

_TRUE = frozenset({"1", "true"})
_FALSE = frozenset({"0", "false"})


def string_parameters(config: mc.ModelConfig) -> dict[str, str]:
    """The config's parameters as plain strings, keys as written."""
    return {key: value.string_value for key, value in config.parameters.items()}


def is_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits and nothing else, as Triton's grammar writes
    numbers: `str.isdigit()` and `int()` also take other scripts' digits ("\u0661"), and `int()`
    underscores."""
    return text.isascii() and text.isdigit()


def int_parameter(model: str, params: Mapping[str, str], key: str, default: int) -> int:
    """A non-negative integer; absent or empty is `default`."""
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    if not is_digits(raw.removeprefix("-")):
        raise ModelLoadError(f"model '{model}': parameter '{key}' must be an integer, got '{raw}'")
    value = int(raw)
    if value < 0:
        raise ModelLoadError(f"model '{model}': parameter '{key}' must be >= 0, got {value}")
    return value


def bool_parameter(model: str, params: Mapping[str, str], key: str, default: bool = False) -> bool:
    """A flag written 1/0 or true/false in any case; absent or empty is `default`."""
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    word = raw.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ModelLoadError(
        f"model '{model}': parameter '{key}' must be 0, 1, false or true, got '{raw}'"
    )


def instance_count(config: mc.ModelConfig, default_cpu_count: int) -> int:
    """The instances `config`'s groups state, on any device (one when it has no groups): the
    sessions that share the cores. A CPU or KIND_AUTO group without a count runs
    `default_cpu_count`; a GPU group without GPUs listed counts once, not per GPU (the CPU
    threads of a CUDA session hardly matter)."""
    if not config.instance_group:
        return 1
    total = 0
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            total += max(1, group.count) * max(1, len(group.gpus))
        else:
            total += group.count if group.count >= 1 else default_cpu_count
    return total
