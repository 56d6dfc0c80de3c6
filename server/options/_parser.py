"""The one argparse parser of `tritonserver` and `convoy serve`, built from the option table; the
values it reads, with the command's defaults filled in; Triton's answer to an unknown option."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from server.options._endpoints import CLOUD, GRPC, HTTP, METRICS
from server.options._internals import INTERNALS
from server.options._option import Option, Profile, Support
from server.options._serving import (
    CACHES,
    CONVOY_OWN,
    LOGGING,
    REPOSITORY,
    SCHEDULING,
    SERVER,
    TRACING,
)

# Every option, Triton's in the order of its parser's groups, then Convoy's own.
OPTIONS: tuple[Option, ...] = (
    *SERVER,
    *REPOSITORY,
    *HTTP,
    *GRPC,
    *METRICS,
    *CLOUD,
    *LOGGING,
    *TRACING,
    *SCHEDULING,
    *CACHES,
    *INTERNALS,
    *CONVOY_OWN,
)
TRITON_EXIT_STATUS = 1  # what tritonserver exits with when its command line is refused
USAGE_LINE = "Usage: tritonserver [options]"
_BAD_VALUE = re.compile(r"argument (--[\w-]+)(?:/--[\w-]+)*: (.*)", re.DOTALL)


class OptionError(ValueError):
    """A command line that parses but asks for what Convoy does not do."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a command line says: every option's value (the command's defaults where it says
    nothing), which options it gave, and the notes to log once the log is set up."""

    profile: Profile
    values: Mapping[str, object]  # by Option.dest; a repeatable option's value is a tuple
    given: frozenset[str]  # the dests the command line set
    notes: tuple[str, ...]  # "--x has no effect in Convoy: ..." lines

    def __getitem__(self, dest: str) -> object:
        return self.values[dest]


def add_options(parser: argparse.ArgumentParser, profile: Profile) -> None:
    """Every option on `parser`; unset values stay None, so that `complete` can tell what the
    command line gave from the command's defaults."""
    for option in OPTIONS:
        if option.name == "help":
            continue  # argparse's own
        default = option.default_for(profile)
        shown = "" if default is None or default is False else f" (default {_shown(default)})"
        if option.support is Support.NO_EFFECT:
            shown += "; no effect in Convoy"
        helptext = option.meaning + shown
        if option.value.parse is None:
            parser.add_argument(
                *option.flags, action="store_true", dest=option.dest, default=None, help=helptext
            )
        else:
            parser.add_argument(
                *option.flags,
                type=option.value.parse,
                action="append" if option.repeat else "store",
                metavar=option.value.metavar,
                dest=option.dest,
                default=None,
                help=helptext,
            )


def complete(
    namespace: argparse.Namespace, profile: Profile, environment: Mapping[str, str]
) -> Parsed:
    """The parsed values with the profile's defaults; a refused option raises OptionError."""
    values: dict[str, object] = {}
    given: set[str] = set()
    notes: list[str] = []
    refused: list[str] = []
    for option in OPTIONS:
        if option.name == "help":
            continue
        value = getattr(namespace, option.dest)
        if value is None:
            value = () if option.repeat else option.default_for(profile)
        else:
            given.add(option.dest)
            value = tuple(value) if option.repeat else value
            if option.support is Support.NO_EFFECT:
                notes.append(f"--{option.name} has no effect in Convoy: {option.behaviour}")
            elif option.support is Support.REFUSED and value != option.default:
                refused.append(
                    f"--{option.name}={_shown(value)} is not supported: {option.behaviour}"
                )
        values[option.dest] = value
    if profile is Profile.TRITON and environment.get("AIP_MODE") == "PREDICTION":
        refused.append(
            "AIP_MODE=PREDICTION (Vertex AI) is not supported: Convoy has no Vertex AI endpoint"
        )
    if refused:
        raise OptionError("\n".join(refused))  # every one at once
    return Parsed(profile, values, frozenset(given), tuple(notes))


class TritonParser(argparse.ArgumentParser):
    """tritonserver's command line: no subcommand; a refused command line is answered as
    Triton's getopt parser answers it, with status 1."""

    def error(self, message: str) -> NoReturn:
        # argparse says "argument --x: <why>"; Triton says 'Bad option: "--x".' then why.
        found = _BAD_VALUE.match(message)
        self._refuse(f'Bad option: "{found[1]}".\n{found[2]}' if found else message)

    def _refuse(self, message: str) -> NoReturn:
        sys.stderr.write(f"{message}\n{USAGE_LINE}\n{self.format_help()}")
        sys.exit(TRITON_EXIT_STATUS)

    def parse_triton(self, argv: Sequence[str], environment: Mapping[str, str]) -> Parsed:
        namespace, extras = self.parse_known_args(argv)
        if extras:
            first = extras[0]
            if first.startswith("-"):
                self._refuse(f"{self.prog}: unrecognized option '{first}'")
            self._refuse(f"Unexpected argument: {first}")
        try:
            return complete(namespace, Profile.TRITON, environment)
        except OptionError as exc:
            self._refuse(str(exc))


def triton_parser() -> TritonParser:
    parser = TritonParser(
        prog="tritonserver",
        description="Serve Triton model repositories with Triton's command line (Convoy).",
    )
    add_options(parser, Profile.TRITON)
    return parser


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_shown(v) for v in value)
    return str(value)
