"""What a python model's worker channel costs per batch, with its arrays in shared memory (the
default) against the same framing with every array on the socket, in one run.

Usage: python scripts/python_channel_bench.py [--sizes-kib 4,1024,16384] [--seconds 2]

An identity model.py (Y = X, FP32) runs in a worker process, as the python backend starts it;
this process plays the server's side of the channel: it sends execute messages with one input
of each size and reads the answer, back to back, for `--seconds` per case. Each case is measured
twice, A B B A. It prints each case's round trip and the CPU both processes spent per batch (this
process's from `time.process_time`, the worker's from /proc), then the ratio of the socket's to
the ring's. Only the channel is measured: no front end, no batcher.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.python._frames import RING_BYTES
from backends.python._process import AskAnswers, WorkerProcess

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
_TICKS = os.sysconf("SC_CLK_TCK")


def _worker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _measure(
    model_dir: Path, ring_bytes: int, array: np.ndarray, seconds: float
) -> tuple[float, float]:
    """Round trip (us) and both processes' CPU per batch (us)."""
    spec = {
        "model_path": str(model_dir / "1" / "model.py"),
        "model_name": "identity",
        "instance_name": "identity_0",
        "version": 1,
        "decoupled": False,
        "iterative": False,
        "args": {"model_config": "{}", "model_name": "identity", "model_version": "1"},
    }
    deadline_ns = time.monotonic_ns() + 60 * 10**9
    answers = AskAnswers(lambda batch, index: False, lambda request: {"error": "none kept"})
    worker = WorkerProcess.start(spec, deadline_ns, answers, ring_bytes)
    try:
        pid = worker._process.pid
        for batch in range(20):  # warm: the ring's pages, the worker's imports
            _round_trip(worker, batch, array, deadline_ns)
        count = 0
        cpu_start = time.process_time() + _worker_cpu_s(pid)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            _round_trip(worker, 100 + count, array, deadline_ns)
            count += 1
        wall = time.perf_counter() - start
        cpu = time.process_time() + _worker_cpu_s(pid) - cpu_start
    finally:
        worker.kill()
    return wall / count * 1e6, cpu / count * 1e6


def _round_trip(worker: WorkerProcess, batch: int, array: np.ndarray, deadline_ns: int) -> None:
    worker.send(("execute", batch, [{"X": array}], ["Y"], [{}]), deadline_ns)
    reply = next(worker.replies(batch, deadline_ns))
    if reply[0] != "done" or reply[2][0]["Y"].nbytes != array.nbytes:
        raise RuntimeError(f"unexpected reply {reply[0]!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kib", default="4,1024,16384")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    ways = {"ring": RING_BYTES, "socket": _SOCKET_ONLY_BYTES}
    with tempfile.TemporaryDirectory(prefix="convoy-channel-") as root:
        model_dir = Path(root) / "identity"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(MODEL_PY, encoding="utf-8")
        print(f"{'input':>10} {'way':>7} {'round trip us':>22} {'CPU us per batch':>24}")
        for kib in (int(size) for size in args.sizes_kib.split(",")):
            array = np.random.default_rng(0).random(kib * 256, dtype=np.float32)
            runs: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
            for way in ("ring", "socket", "socket", "ring"):  # A B B A
                runs[way].append(_measure(model_dir, ways[way], array, args.seconds))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
