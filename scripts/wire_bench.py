"""What the worker-to-core path costs in Python: descriptor messages through a `Channel` between
two processes (one way, with each side's CPU time per message; round trips one at a time and
pipelined, in wall time), and the CPU time of the arena's allocate + release, array view and write.

    .venv/bin/python scripts/wire_bench.py [--messages 200000] [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as `python scripts/wire_bench.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from server.workers.arena import Allocator, Arena
from server.workers.frames import Channel, Message

BURST = 256  # messages sent per loop iteration in the one-way measurement
PIPELINE_DEPTH = 64  # round trips in flight in the pipelined measurement


def descriptor(kind: str, request_id: int) -> Message:
    """An infer request's descriptor as a worker would send it: one FP32 input in the arena."""
    inputs = (("INPUT0", "FP32", (1, 16), 4096 + 64 * (request_id % 1000), 64),)
    return (kind, request_id, "mlp", "", inputs, ("OUTPUT0",), 0, 0)


class Peer:
    """The other process: counts "infer" messages between "start" and "end", then replies with
    its CPU seconds; echoes everything else."""

    def __init__(self, lost: asyncio.Future[Exception | None]) -> None:
        self.channel = Channel(self.on_message, lost.set_result)
        self.count = 0
        self.started_cpu_s = 0.0

    def on_message(self, message: Message) -> None:
        kind = message[0]
        if kind == "infer":
            self.count += 1
        elif kind == "start":
            self.count, self.started_cpu_s = 0, time.process_time()
        elif kind == "end":
            self.channel.send(("done", time.process_time() - self.started_cpu_s, self.count))
        else:
            self.channel.send(message)


async def serve_peer(fd: int) -> None:
    lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
    peer = Peer(lost)
    sock = socket.socket(fileno=fd)
    await asyncio.get_running_loop().create_unix_connection(lambda: peer.channel, sock=sock)
    await lost


class Driver:
    """This process's end: resolves `reply` with the peer's "done", counts echoes, and keeps
    `depth` round trips in flight until `total` have come back."""

    def __init__(self, lost: asyncio.Future[Exception | None]) -> None:
        self.channel = Channel(self.on_message, lost.set_result)
        self.reply: asyncio.Future[Message] | None = None
        self.echoed = 0
        self.total = 0
        self.depth = 0

    def on_message(self, message: Message) -> None:
        if message[0] == "done":
            assert self.reply is not None
            self.reply.set_result(message)
            return
        self.echoed += 1
        sent = self.echoed + self.depth - 1
        if sent < self.total:
            self.channel.send(descriptor("echo", sent))
        if self.echoed == self.total and self.reply is not None:
            self.reply.set_result(message)

    def expect_reply(self) -> asyncio.Future[Message]:
        self.reply = asyncio.get_running_loop().create_future()
        return self.reply


async def one_way(driver: Driver, messages: int) -> None:
    reply = driver.expect_reply()
    driver.channel.send(("start",))
    started_s, started_cpu_s = time.perf_counter(), time.process_time()
    for first in range(0, messages, BURST):
        for request_id in range(first, min(first + BURST, messages)):
            driver.channel.send(descriptor("infer", request_id))
        await driver.channel.drain()
        await asyncio.sleep(0)
    sender_cpu_s = time.process_time() - started_cpu_s
    driver.channel.send(("end",))
    _, receiver_cpu_s, count = await reply
    wall_s = time.perf_counter() - started_s
    assert count == messages
    sender_us, receiver_us = (cpu_s / messages * 1e6 for cpu_s in (sender_cpu_s, receiver_cpu_s))
    print(
        f"one way, bursts of {BURST}: {messages / wall_s:,.0f} messages/s; CPU per message: "
        f"sender {sender_us:.2f} us, receiver {receiver_us:.2f} us"
    )


async def round_trips(driver: Driver, total: int, depth: int) -> None:
    driver.echoed, driver.total, driver.depth = 0, total, depth
    reply = driver.expect_reply()
    started_s = time.perf_counter()
    for request_id in range(depth):
        driver.channel.send(descriptor("echo", request_id))
    await reply
    wall_s = time.perf_counter() - started_s
    print(f"round trips, {depth} in flight: {total / wall_s:,.0f}/s")


async def drive(messages: int, loop: str) -> None:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    command = [sys.executable, __file__, "--peer", str(theirs.fileno()), "--loop", loop]
    peer = subprocess.Popen(command, pass_fds=[theirs.fileno()])
    theirs.close()
    lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
    driver = Driver(lost)
    await asyncio.get_running_loop().create_unix_connection(lambda: driver.channel, sock=mine)
    await one_way(driver, messages)
    await round_trips(driver, messages // 10, 1)
    await round_trips(driver, messages, PIPELINE_DEPTH)
    driver.channel.close()
    await lost
    peer.wait(30)


def bench_arena(operations: int) -> None:
    allocator = Allocator(256 << 20)
    rng = random.Random(1)
    sizes = [rng.choice([64, 300, 4096, 16 << 10, 64 << 10, 1 << 20]) for _ in range(operations)]
    live = [allocator.allocate(size) for size in sizes[:256]]
    # CPU time, not wall time: on a shared machine the figures then leave out other processes.
    started_cpu_s = time.process_time()
    for i, size in enumerate(sizes):
        slot = i % len(live)
        offset = live[slot]
        assert offset is not None
        allocator.release(offset)
        live[slot] = allocator.allocate(size)
    pair_s = (time.process_time() - started_cpu_s) / operations
    print(
        f"allocate + release (256 live, 64 B to 1 MiB): {1 / pair_s:,.0f}/s, {pair_s * 1e6:.2f} us"
    )
    with Arena.create(1 << 20) as arena:
        payload = bytes(4096)
        for name, step in (
            ("arena.array (1, 16) float32", lambda: arena.array(4096, np.float32, (1, 16))),
            ("arena.write 4 KiB bytes", lambda: arena.write(4096, payload)),
        ):
            started_cpu_s = time.process_time()
            for _ in range(operations):
                step()
            print(f"{name}: {(time.process_time() - started_cpu_s) / operations * 1e6:.2f} us")


def run(main: Coroutine[Any, Any, None], loop: str) -> None:
    if loop == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Costs of the worker-to-core wire and arena.")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--peer", type=int, help=argparse.SUPPRESS)  # the child's socket fd
    args = parser.parse_args(argv)
    if args.peer is not None:
        run(serve_peer(args.peer), args.loop)
        return 0
    run(drive(args.messages, args.loop), args.loop)
    bench_arena(args.messages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
