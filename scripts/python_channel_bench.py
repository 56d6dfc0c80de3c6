"""What a python model's worker channel costs per batch, with its arrays in shared memory (the
default) against the same framing with every array on the socket, in one run.

Usage: python scripts/python_channel_bench.py [--sizes-kib 4,1024,16384] [--requests 1]
                                              [--seconds 2]

An identity model.py (Y = X, FP32) runs in a worker process, as the python backend starts it;
this process plays the server's side of the channel: it sends execute messages of `--requests`
requests, each with one input of each size, and reads the answer, back to back, for `--seconds`
per case. Each case is measured twice, A B B A. It prints each case's round trip and the CPU
both processes spent per batch (this process's from `time.process_time`, the worker's from
/proc), then the ratio of the socket's to the ring's, and the worker's side of a batch run in
this process, with warm caches and no process to wake (its channel's receive, execute, its
send; for batches of up to a quarter of the ring). Only the channel is measured: no front end,
no batcher. First it prints the floor under any such channel: a byte bounced between two
processes over a socket pair, each free to run on any core and then both pinned to one core.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.python._config import worker_spec
from backends.python._frames import LEASE_NEW_BATCH, Reader, copied, read_frame, write_message
from backends.python._model_loading import initialize_model, load_utils, model_class
from backends.python._model_server import ModelServer
from backends.python._pickling import stack_rows, unstack_rows
from backends.python._process import AskAnswers, WorkerProcess
from backends.python._ring import RING_BYTES, Ring
from backends.python._worker_channel import WorkerChannel
from proto import model_config_pb2 as mc
from scripts.bench_drivers import CpuMeter

MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", r.inputs()[0].as_numpy())])
            for r in requests
        ]
"""
# A ring smaller than any input: every array goes inline, on the socket.
_SOCKET_ONLY_BYTES = 4096


def _measure(
    model_dir: Path, ring_bytes: int, array: np.ndarray, requests: int, seconds: float
) -> tuple[float, float]:
    """Round trip (us) and both processes' CPU per batch (us)."""
    spec = worker_spec("identity_0", model_dir, 1, mc.ModelConfig(name="identity"))
    deadline_ns = time.monotonic_ns() + 60 * 10**9
    answers = AskAnswers(lambda batch, index: False, lambda request: {"error": "none kept"})
    worker = WorkerProcess.start(spec, deadline_ns, answers, ring_bytes)
    try:
        worker_cpu = CpuMeter(worker.pid)
        # One array per request, as a batch holds: the same array twice would be pickled once.
        arrays = [array.copy() for _ in range(requests)]
        for batch in range(20):  # warm: the ring's pages, the worker's imports
            _round_trip(worker, batch, arrays, deadline_ns)
        count = 0
        cpu_start = time.process_time() + worker_cpu.own_seconds()
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            _round_trip(worker, 100 + count, arrays, deadline_ns)
            count += 1
        wall = time.perf_counter() - start
        cpu = time.process_time() + worker_cpu.own_seconds() - cpu_start
    finally:
        worker.kill()
    return wall / count * 1e6, cpu / count * 1e6


def _round_trip(
    worker: WorkerProcess, batch: int, arrays: list[np.ndarray], deadline_ns: int
) -> None:
    inputs = [{"X": array} for array in arrays]
    worker.send(("execute", batch, inputs, ["Y"], [{} for _ in inputs]), deadline_ns)
    reply = next(worker.replies(batch, deadline_ns))
    # Small outputs come stacked, as the server's Replies.outcome reads them.
    answers = unstack_rows(reply[2]) if type(reply[2]) is tuple else reply[2]
    if reply[0] != "done" or [p["Y"].nbytes for p in answers] != [a.nbytes for a in arrays]:
        raise RuntimeError(f"unexpected reply {reply[0]!r}")


def _warm(model_dir: Path, array: np.ndarray, requests: int, seconds: float) -> float:
    """The worker's side of a batch in this process, with warm caches and no process to wake:
    its channel's receive, execute with the pb_utils objects, and its send, as a worker runs
    them, over a socket pair and the rings; the server's side is done in between, untimed.
    Median us per batch."""
    spec = worker_spec("identity_0", model_dir, 1, mc.ModelConfig(name="identity"))
    utils = load_utils()
    model = initialize_model(spec, model_class(spec, "convoy_channel_identity"))
    ours, theirs = socket.socketpair()
    to_worker, to_server = (Ring.create(f"convoy-warm-{way}", RING_BYTES) for way in ("in", "out"))
    worker_ends = [Ring(os.dup(ring.fd), ring.size) for ring in (to_worker, to_server)]
    channel = WorkerChannel(theirs, *worker_ends)
    server = ModelServer(channel, utils, model, spec)
    reader = Reader(ours.recv_into)
    arrays = [array.copy() for _ in range(requests)]
    times: list[int] = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            inputs = stack_rows([{"X": one} for one in arrays])
            message = ("execute", len(times), inputs, ["Y"], [{} for _ in arrays])
            write_message(ours, message, to_worker, LEASE_NEW_BATCH)
            start = time.perf_counter_ns()
            server.execute(*channel.receive()[1:])
            times.append(time.perf_counter_ns() - start)
            _, buffers, entry, _ = read_frame(reader.read_exact, to_server)
            copied(to_server, buffers, entry)
    finally:
        ours.close()
        theirs.close()
        for ring in (*worker_ends, to_worker, to_server):
            ring.close()
    times.sort()
    return times[len(times) // 2] / 1e3


def _ping_pong(seconds: float, cpu: int | None) -> tuple[float, float]:
    """A byte sent back and forth between this process and a child over a socket pair: the
    round trip and both processes' CPU per round trip (us); `cpu`: pin both to that core."""
    ours, theirs = socket.socketpair()
    trips = max(1000, int(seconds * 20_000))
    pid = os.fork()
    if pid == 0:  # the child answers each byte, then exits
        ours.close()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        for _ in range(trips):
            theirs.recv(1)
            theirs.send(b"y")
        os._exit(0)
    theirs.close()
    affinity = os.sched_getaffinity(0)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    try:
        cpu_start, start = time.process_time(), time.perf_counter()
        for _ in range(trips):
            ours.send(b"x")
            ours.recv(1)
        wall, own_cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        os.sched_setaffinity(0, affinity)
        ours.close()
    usage = os.wait4(pid, 0)[2]
    return wall / trips * 1e6, (own_cpu + usage.ru_utime + usage.ru_stime) / trips * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kib", default="4,1024,16384")
    parser.add_argument("--requests", type=int, default=1, help="requests per batch")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    ways = {"ring": RING_BYTES, "socket": _SOCKET_ONLY_BYTES}
    for where, cpu in (("any core", None), ("one core", min(os.sched_getaffinity(0)))):
        trip, both = _ping_pong(args.seconds, cpu)
        print(
            f"a byte between two processes, {where}: round trip {trip:,.1f} us, CPU {both:,.1f} us"
        )
    with tempfile.TemporaryDirectory(prefix="convoy-channel-") as root:
        model_dir = Path(root) / "identity"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(MODEL_PY, encoding="utf-8")
        print(f"{'input':>10} {'way':>7} {'round trip us':>22} {'CPU us per batch':>24}")
        for kib in (int(size) for size in args.sizes_kib.split(",")):
            array = np.random.default_rng(0).random(kib * 256, dtype=np.float32)
            runs: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
            for way in ("ring", "socket", "socket", "ring"):  # A B B A
                runs[way].append(_measure(model_dir, ways[way], array, args.requests, args.seconds))
            for way, results in runs.items():
                trips = " / ".join(f"{trip:,.0f}" for trip, _ in results)
                cpus = " / ".join(f"{cpu:,.0f}" for _, cpu in results)
                print(f"{kib:>7} KiB {way:>7} {trips:>22} {cpus:>24}")
            ring_cpu = sum(cpu for _, cpu in runs["ring"])
            socket_cpu = sum(cpu for _, cpu in runs["socket"])
            ring_trip = sum(trip for trip, _ in runs["ring"])
            socket_trip = sum(trip for trip, _ in runs["socket"])
            print(
                f"{kib:>7} KiB  socket / ring: round trip {socket_trip / ring_trip:.2f}x, "
                f"CPU {socket_cpu / ring_cpu:.2f}x"
            )
            # One thread plays both ends: the batch must fit the rings, never wait on the socket.
            if args.requests * array.nbytes <= RING_BYTES // 4:
                warm = _warm(model_dir, array, args.requests, args.seconds)
                side = "the worker's side in one process, warm"
                print(f"{kib:>7} KiB  {side}: {warm:,.0f} us per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
