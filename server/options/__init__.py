"""The command line of `tritonserver` and `convoy serve`: one table of Triton's options (and
Convoy's own), one parser built from it with two sets of defaults, and the settings it yields."""

from server.options._option import Option, Profile, Support
from server.options._parser import (
    OPTIONS,
    TRITON_EXIT_STATUS,
    OptionError,
    Parsed,
    TritonParser,
    add_options,
    complete,
    triton_parser,
)
from server.options._settings import settings_from

__all__ = [
    "OPTIONS",
    "TRITON_EXIT_STATUS",
    "Option",
    "OptionError",
    "Parsed",
    "Profile",
    "Support",
    "TritonParser",
    "add_options",
    "complete",
    "settings_from",
    "triton_parser",
]
