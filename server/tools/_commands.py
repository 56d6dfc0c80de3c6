"""Dispatch of `convoy doctor ...` and `convoy profile ...`; each imports its own dependencies
only when it runs, so `convoy serve` never pays for them."""

from __future__ import annotations

from collections.abc import Sequence

TOOL_COMMANDS = frozenset({"doctor"})


def run_tool(argv: Sequence[str]) -> int:
    """Run `argv[0]` (one of TOOL_COMMANDS) with the rest of the command line; the exit status."""
    command, rest = argv[0], list(argv[1:])
    if command == "doctor":
        from server.tools.doctor import main as doctor

        return doctor(rest)
    raise ValueError(f"unknown command '{command}' (expected one of {sorted(TOOL_COMMANDS)})")
