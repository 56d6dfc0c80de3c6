"""`convoy serve ...` and `tritonserver ...`: one command line (`server.options`, with each
command's defaults) onto `ServerSettings`, then run until a signal."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import uvloop

from server.app import App, convoy_version
from server.contract.allocator import keep_large_buffers
from server.contract.errors import ServerError
from server.contract.logs import LogControl
from server.contract.scheduling import loop_first
from server.options import (
    TRITON_EXIT_STATUS,
    OptionError,
    Profile,
    add_options,
    complete,
    settings_from,
    triton_parser,
)
from server.settings import ServerSettings
from server.tools import TOOL_COMMANDS, run_tool

_log = logging.getLogger("convoy")
CONVOY_EXIT_STATUS = 2  # convoy serve refuses a command line as argparse does


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convoy", description="Serve a Triton-style model repository over Triton's protocol."
    )
    parser.add_argument("--version", action="version", version=f"convoy {convoy_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve model repositories",
        description="Triton's options with Convoy's defaults (loopback addresses; see the "
        "docs' Coming from Triton page for tritonserver's).",
    )
    add_options(serve, Profile.CONVOY)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`convoy serve ...`."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words and words[0] in TOOL_COMMANDS:  # `convoy doctor ...`, `convoy profile ...`
        return run_tool(words)
    args = build_parser().parse_args(argv)
    try:
        settings, notes = settings_from(complete(args, Profile.CONVOY, os.environ), os.environ)
    except (OptionError, ServerError) as exc:
        print(f"convoy serve: {exc}", file=sys.stderr)
        return CONVOY_EXIT_STATUS
    return _run(settings, notes)


def tritonserver(argv: Sequence[str] | None = None) -> int:
    """`tritonserver ...`: Triton's command line and defaults; refusals exit as Triton's."""
    parsed = triton_parser().parse_triton(sys.argv[1:] if argv is None else argv, os.environ)
    try:
        settings, notes = settings_from(parsed, os.environ)
    except (OptionError, ServerError) as exc:
        print(f"tritonserver: {exc}", file=sys.stderr)
        return TRITON_EXIT_STATUS
    return _run(settings, notes)


def _run(settings: ServerSettings, notes: Sequence[str]) -> int:
    try:
        logs = LogControl(settings.log)
    except ServerError as exc:  # e.g. a --log-file that cannot be opened
        print(f"cannot serve: {exc}", file=sys.stderr)
        return 1
    for note in notes:
        _log.warning("%s", note)
    if keep_large_buffers(os.environ):  # this process's malloc, and the processes it starts
        _log.debug("malloc keeps large buffers: mmap and trim thresholds raised")
    try:
        return uvloop.run(serve(settings, logs))
    except (OSError, ValueError, ServerError) as exc:
        _log.error("cannot serve: %s", exc)
        return 1


async def serve(settings: ServerSettings, logs: LogControl | None = None) -> int:
    """Run until SIGTERM or SIGINT, then drain; the exit status. A second signal during the
    drain stops at once, as uvicorn's rule (status 1): what is still in flight is cut."""
    app = App(settings, logs)
    stop, force = asyncio.Event(), asyncio.Event()

    def signalled() -> None:
        if stop.is_set() and not force.is_set():
            _log.warning("second signal: stopping now, without waiting for requests in flight")
            force.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, signalled)
    await app.start()
    with loop_first(os.environ):  # the threads started so far, then every few seconds
        await stop.wait()
    _log.info("signal received: draining (a second signal stops at once)")
    await app.stop(force)
    if force.is_set():
        # What still runs (a model's execute in its thread) is not waited for.
        logging.shutdown()
        os._exit(1)
    return 0
