"""Commands that prepare a model repository before it serves: `convoy doctor` (a pre-flight
check that loads nothing into a server) and `convoy profile` (a capacity sweep through Convoy's
own batcher and instances). Both run the code the server runs at load time."""

from server.tools._commands import TOOL_COMMANDS, run_tool

__all__ = ["TOOL_COMMANDS", "run_tool"]
