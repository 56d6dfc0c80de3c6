"""One front-end worker process (`python -m server frontend ...`, started by the core's
`WorkerPool`): the gRPC and HTTP front ends on the shared ports over a `CoreClient`. It drains
and exits on SIGTERM, and exits when the core process goes away (its channel closes, and the
kernel sends SIGTERM when the parent dies)."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

import uvloop

from server.contract.logs import LogControl, LogState
from server.contract.scheduling import loop_first
from server.contract.settings import FrontEndSettings
from server.frontend.process import FrontEnd
from server.workers.arena import Arena
from server.workers.client import CoreClient

_log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # prctl(2)
DRAIN_S = 30.0  # bound on the calls in flight at SIGTERM


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convoy frontend", description="A front-end worker (started by `convoy serve`)."
    )
    parser.add_argument("--channel-fd", type=int, required=True)
    parser.add_argument("--input-arena-fd", type=int, required=True)
    parser.add_argument("--output-arena-fd", type=int, required=True)
    parser.add_argument("--arena-bytes", type=int, required=True)
    parser.add_argument("--worker-index", type=int, default=0)
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the core, which stops us
    return uvloop.run(_serve(args))


def _die_with_parent() -> None:
    # If the core dies without closing the channel (SIGKILL), the kernel sends us SIGTERM.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def _serve(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    client = CoreClient(
        Arena.attach(args.input_arena_fd, args.arena_bytes),
        Arena.attach(args.output_arena_fd, args.arena_bytes),
    )
    channel = socket.socket(fileno=args.channel_fd)
    channel.setblocking(False)
    await loop.create_unix_connection(lambda: client.channel, sock=channel)
    welcome = await client.welcome()
    settings = FrontEndSettings.from_plain(welcome[1])
    logs = LogControl(LogState())
    logs.update(welcome[5])  # the core's settings, as a LOGS message carries them
    client.on_logs = logs.update
    front_end = FrontEnd(client, settings, forward=client)
    await front_end.start()
    await front_end.set_health(welcome[4])
    client.on_health = lambda serving: loop.create_task(front_end.set_health(serving))
    draining: list[asyncio.Task[None]] = []  # held until it is done
    client.on_stopping = lambda: draining.append(loop.create_task(front_end.drain()))
    client.ready(front_end.grpc_port, front_end.http_port)
    # What the worker holds from now on lives as long as it does: leave it out of the garbage
    # collector's passes (gRPC's calls keep them frequent; see server.core.heap).
    gc.collect()
    gc.freeze()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, _set_once, stop)
    with loop_first(os.environ):  # the threads started so far, then every few seconds
        await asyncio.wait({stop, client.lost}, return_when=asyncio.FIRST_COMPLETED)
    await front_end.set_health(False)
    await front_end.stop(grace_s=0.0 if client.lost.done() else DRAIN_S)
    _log.info("front-end worker %d stopped", args.worker_index)
    return 0


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
