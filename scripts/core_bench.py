"""The core's own cost per request: descriptor in, queue, batch, a no-op model, result out.

The core (this process) serves one worker channel (server/workers/link.WorkerLink) for a no-op
ONNX model (Identity, FP32 [4], max_batch_size 64, dynamic batching); a driver process plays the
front-end worker with the real CoreClient, keeping `--in-flight` requests going for `--seconds`,
with no gRPC in the way. The figures are the core's: completed requests per second, and the
core process's CPU time (its event loop, the instance's thread) per request. A second line
measures the same core without the wire: coroutines calling LocalCore.infer in this process.

    .venv/bin/python scripts/core_bench.py [--seconds 5] [--in-flight 256] [--wire-only]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import uvloop
from onnx import TensorProto

from scripts import models
from server.contract.requests import InferInput, InferOptions, InferRequest
from server.core.engine import Engine
from server.core.local import LocalCore
from server.core.repository import Repository
from server.core.shared_memory import SharedMemory, SharedMemoryRegistry
from server.workers import WorkerLink, frames, messages
from server.workers.arena import Arena
from server.workers.client import CoreClient

MODEL = "noop"
ARENA_BYTES = 64 * 1024 * 1024
CONFIG = models.identity_config(MODEL, TensorProto.FLOAT, max_batch_size=64) + (
    "dynamic_batching { }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
)


def _request(array: np.ndarray) -> InferRequest:
    return InferRequest(
        MODEL, "", [InferInput("INPUT0", "FP32", array.shape, array)], [], InferOptions()
    )


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _keep_busy(infer, in_flight: int, seconds: float) -> int:  # type: ignore[no-untyped-def]
    """`in_flight` loops each sending one request after another; returns the answers."""
    done = 0
    deadline = time.monotonic() + seconds
    array = np.arange(4, dtype=np.float32).reshape(1, 4)

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            response = await infer(_request(array))
            assert response.outputs[0].array is not None
            done += 1

    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return done


async def _core(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        models.write_model(repo, MODEL, models.identity(TensorProto.FLOAT), CONFIG)
        repository = Repository((repo,), 1)
        engine = Engine(repository, strict_readiness=False)
        await repository.load_many()
        core = LocalCore(engine, SharedMemory(SharedMemoryRegistry()))
        await _keep_busy(core.infer, args.in_flight, 1.0)  # warm up
        if not args.wire_only:
            start_s, cpu_s, runs = time.monotonic(), _cpu_s(), _executions(repository)
            done = await _keep_busy(core.infer, args.in_flight, args.seconds)
            elapsed_s, used_s = time.monotonic() - start_s, _cpu_s() - cpu_s
            batches = _executions(repository) - runs
            _report("in process, no wire", done, elapsed_s, used_s, batches)

        links, drivers, results = [], [], []
        for index in range(args.drivers):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            inputs, outputs = Arena.create(ARENA_BYTES), Arena.create(ARENA_BYTES)
            worker_link = WorkerLink(core, inputs, outputs, lambda settings: None)
            ours.setblocking(False)
            loop = asyncio.get_running_loop()
            await loop.connect_accepted_socket(lambda link=worker_link: link.channel, ours)
            fds = (theirs.fileno(), inputs.fd, outputs.fd)
            result = Path(tmp) / f"driver-{index}.count"
            command = [sys.executable, __file__, "--drive", *map(str, fds)]
            command += ["--seconds", str(args.seconds), "--in-flight", str(args.in_flight)]
            command += ["--result", str(result), "--driver", args.driver]
            drivers.append(subprocess.Popen(command, pass_fds=fds))
            theirs.close()
            links.append(worker_link)
            results.append(result)
        for worker_link in links:
            await worker_link.ready  # each driver says when its load starts
        start_s, cpu_s, runs = time.monotonic(), _cpu_s(), _executions(repository)
        while any(driver.poll() is None for driver in drivers):
            await asyncio.sleep(0.05)
        elapsed_s, used_s = time.monotonic() - start_s, _cpu_s() - cpu_s
        batches = _executions(repository) - runs
        done = sum(int(result.read_text()) for result in results)
        _report(f"through the wire x{args.drivers}", done, elapsed_s, used_s, batches)
        for worker_link in links:
            worker_link.close()
        await repository.unload_all(timeout_s=1.0)


def _report(name: str, done: int, elapsed_s: float, cpu_s: float, batches: int) -> None:
    rate = done / elapsed_s
    cpu_us = cpu_s / max(done, 1) * 1e6
    print(
        f"{name:22} {rate:9.0f} req/s   core CPU {cpu_us:6.1f} us/request   "
        f"avg batch {done / max(batches, 1):5.1f} ({done} requests)"
    )


def _executions(repository: Repository) -> int:
    return repository.get(MODEL).stats.execution_count


async def _drive(args: argparse.Namespace) -> None:
    channel_fd, input_fd, output_fd = args.fds
    inputs, outputs = Arena.attach(input_fd, ARENA_BYTES), Arena.attach(output_fd, ARENA_BYTES)
    sock = socket.socket(fileno=channel_fd)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    if args.driver == "client":  # a front-end worker's own cost included
        client = CoreClient(inputs, outputs)
        await loop.create_unix_connection(lambda: client.channel, sock=sock)
        await _keep_busy(client.infer, args.in_flight, 1.0)  # warm up
        client.ready(0, 0)
        done = await _keep_busy(client.infer, args.in_flight, args.seconds)
    else:
        done = await _raw_load(loop, sock, inputs, args)
    args.result.write_text(str(done))


async def _raw_load(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, inputs: Arena, args: argparse.Namespace
) -> int:
    """As little work as a driver can do: one input block written once, the same descriptor
    sent again and again, each answer's output block, if it has one, released (one RELEASE
    message per loop iteration, as `CoreClient` sends them) and the next request sent."""
    array = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs.write_array(0, array)
    placement = [(messages.ARENA, 0, array.nbytes)]
    template = messages.encode_infer(0, False, _request(array), placement)
    counting = False
    done = 0
    ids = iter(range(1, 1 << 62))
    deadline = 0.0
    released: list[int] = []

    def send_releases() -> None:
        channel.send((messages.RELEASE, tuple(released)))
        released.clear()

    def on_message(message: frames.Message) -> None:
        nonlocal done
        if message[0] != messages.ANSWER:
            return
        _, _, _, _, kind, where = message[5][0][:6]  # an output small enough comes inline
        if kind == messages.ARENA:
            if not released:
                loop.call_soon(send_releases)
            released.append(where)
        if counting:
            done += 1
        if time.monotonic() < deadline:
            channel.send((messages.INFER, next(ids), *template[2:]))

    channel = frames.Channel(on_message, lambda exc: None)
    await loop.create_unix_connection(lambda: channel, sock=sock)
    for warm, seconds in ((True, 1.0), (False, args.seconds)):
        deadline = time.monotonic() + seconds
        counting = not warm
        if not warm:
            channel.send((messages.READY, 0, 0))
        for _ in range(args.in_flight):
            channel.send((messages.INFER, next(ids), *template[2:]))
        await asyncio.sleep(seconds + 0.5)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--wire-only", action="store_true", help="only through the wire")
    parser.add_argument("--drivers", type=int, default=1, help="worker-like driver processes")
    parser.add_argument(
        "--driver",
        choices=("raw", "client"),
        default="raw",
        help="raw: drivers replay one descriptor (the core's cost alone); client: CoreClient",
    )
    parser.add_argument("--drive", nargs=3, type=int, dest="fds", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fds:
        uvloop.run(_drive(args))
        return
    print(f"core_bench: {MODEL} (Identity), {args.in_flight} in flight, {os.cpu_count()} CPUs")
    uvloop.run(_core(args))


if __name__ == "__main__":
    main()
