"""Numbers in flags, settings, headers and versions as Triton's grammar writes them: ASCII digits.
`str.isdigit()` and `int()` also take other scripts' digits ("\\u0661"), and `int()` underscores
("1_0"), so neither alone is the check."""

from __future__ import annotations

import re

_INTEGER = re.compile(r"\s*[-+]?[0-9]+\s*")


def is_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits and nothing else."""
    return text.isascii() and text.isdigit()


def parse_integer(text: str) -> int | None:
    """`text` as an integer, a sign and surrounding blanks allowed; None if it is not one."""
    return int(text) if _INTEGER.fullmatch(text) else None
