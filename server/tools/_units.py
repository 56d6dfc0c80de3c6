"""Byte counts as the tools read them on the command line and print them."""

from __future__ import annotations

import argparse

from server.contract.numbers import is_digits
from server.core.repository import auto_limit_bytes

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(count: int) -> str:
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def budget_bytes(text: str) -> int:
    """`--memory-budget`: a number of bytes, or auto as `convoy serve --memory-budget auto`
    (half the GPUs' memory where there are GPUs, else half the RAM)."""
    if text == "auto":
        return auto_limit_bytes()
    if not is_digits(text) or int(text) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of bytes or auto, got '{text}'"
        )
    return int(text)
