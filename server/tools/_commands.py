"""Dispatch of `convoy doctor ...` and `convoy profile ...`; each imports its own dependencies
only when it runs, so `convoy serve` never pays for them."""

from __future__ import annotations

import sys
from collections.abc import Sequence

TOOL_COMMANDS = frozenset({"doctor", "profile"})


def run_tool(argv: Sequence[str]) -> int:
    """Run `argv[0]` (one of TOOL_COMMANDS) with the rest of the command line; the exit status."""
    command, rest = argv[0], list(argv[1:])
    if command == "doctor":
        from server.tools.doctor import main as doctor

        return doctor(rest)
    if command == "profile":
        try:
            from server.tools.profile import main as profile
        except ImportError as exc:  # rich (and matplotlib, tritonclient) come in an extra
            print(f"convoy profile: {exc}; pip install 'convoy[profile]'", file=sys.stderr)
            return 1
        return profile(rest)
    raise ValueError(f"unknown command '{command}' (expected one of {sorted(TOOL_COMMANDS)})")
