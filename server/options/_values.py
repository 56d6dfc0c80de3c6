"""How option arguments are read: Triton's booleans and numbers, with Triton's words for a bad
value, and the structured values (`GROUPS:KEY=VALUE`, `[BACKEND,]KEY=VALUE`, ...)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from backends import usable_cores
from server.contract.numbers import is_digits, parse_integer
from server.contract.settings import RestrictedProtocol
from server.core.repository import auto_limit_bytes
from server.frontend.grpc import RESTRICTABLE_GROUPS
from server.settings import auto_workers

_TRUE = ("true", "on", "1", "yes")
_FALSE = ("false", "off", "0", "no")


@dataclass(frozen=True, slots=True)
class Value:
    """How one option's argument is read; `parse` None: a switch that takes no argument."""

    metavar: str  # the argument's name in --help and the docs' option table
    parse: Callable[[str], object] | None


def triton_bool(text: str) -> bool:
    """Triton's booleans (true/on/1, false/off/0, any case), and yes/no."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid value for bool option: {text}")


def integer(text: str) -> int:
    value = parse_integer(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}")
    return value


def microseconds(text: str) -> int:
    """A non-negative whole number of microseconds."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of microseconds >= 0, got {text}")
    return value


def seconds(text: str) -> float:
    """A non-negative number of seconds; fractions are allowed (Triton reads whole seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text}")
    return value


def verbose_level(text: str) -> int:
    """--log-verbose: an integer level, or true (1) and false (0) as Triton takes them."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return integer(text)


def choice(*allowed: str, fold_case: bool = False) -> Callable[[str], str]:
    """One of `allowed`; Triton lower-cases some of its choices (`fold_case`)."""

    def parse(text: str) -> str:
        value = text.lower() if fold_case else text
        if value not in allowed:
            raise argparse.ArgumentTypeError(
                f"invalid argument '{text}', expected one of {', '.join(allowed)}"
            )
        return value

    return parse


def restricted(text: str) -> RestrictedProtocol:
    """Triton's `<group>[,<group>...]:<key>=<value>` ("model-repository:admin-key=secret")."""
    groups, _, header = text.partition(":")
    key, _, value = header.partition("=")
    unknown = set(groups.split(",")) - RESTRICTABLE_GROUPS
    if not groups or not key or not value or unknown:
        raise argparse.ArgumentTypeError(
            f"expected GROUPS:KEY=VALUE with groups among {sorted(RESTRICTABLE_GROUPS)}, "
            f"got '{text}'"
        )
    return RestrictedProtocol(frozenset(groups.split(",")), key.strip().lower(), value)


def budget(text: str) -> int:
    if text == "auto":
        return auto_limit_bytes()
    value = integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the memory budget must be positive, got {value}")
    return value


def workers(text: str) -> int:
    if text == "auto":
        return auto_workers(usable_cores())
    if not is_digits(text):
        raise argparse.ArgumentTypeError(f"expected a number of workers or auto, got '{text}'")
    return int(text)


def setting(text: str) -> tuple[str, str]:
    """`[GROUP,]KEY=VALUE` (--backend-config, --metrics-config) as (key, value); the value may
    hold commas (`summary_quantiles=0.5:0.05,0.9:0.01`), the group is not needed."""
    key, _, value = text.partition("=")
    key = key.rpartition(",")[2]
    if not key or not value:
        raise argparse.ArgumentTypeError(f"'{text}': expected [GROUP,]KEY=VALUE")
    return key, value


def quantiles(text: str) -> tuple[tuple[float, float], ...]:
    """Triton's summary_quantiles: `<quantile>:<error>,...` (e.g. "0.5:0.05,0.9:0.01")."""
    pairs: list[tuple[float, float]] = []
    for item in text.split(","):
        quantile, _, error = item.partition(":")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"summary_quantiles '{text}': expected QUANTILE:ERROR[,QUANTILE:ERROR...]"
            ) from None
        if not 0.0 <= pair[0] <= 1.0:
            raise argparse.ArgumentTypeError(f"summary_quantiles: {pair[0]} is not in [0, 1]")
        pairs.append(pair)
    return tuple(pairs)


def metrics_config(entries: Sequence[tuple[str, str]]) -> dict[str, object]:
    """--metrics-config entries as typed values, by Triton's keys."""
    known: dict[str, Callable[[str], object]] = {
        "counter_latencies": triton_bool,
        "histogram_latencies": triton_bool,
        "summary_latencies": triton_bool,
        "summary_quantiles": quantiles,
    }
    values: dict[str, object] = {}
    for key, raw in entries:
        if key not in known:
            raise argparse.ArgumentTypeError(
                f"--metrics-config {key}: expected one of {', '.join(known)}"
            )
        values[key] = known[key](raw)
    return values


BOOL = Value("BOOL", triton_bool)
INT = Value("N", integer)
SECONDS = Value("SECONDS", seconds)
MILLISECONDS = Value("MS", integer)
MICROSECONDS = Value("US", microseconds)
TEXT = Value("TEXT", str)
FILE = Value("FILE", str)
ADDRESS = Value("ADDRESS", str)
PATTERN = Value("REGEX", str)
SWITCH = Value("", None)
