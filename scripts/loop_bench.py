"""The event loop's thread, in native frames: Convoy's server against the bare grpc.aio server
(`scripts/canned_grpc.py`), unary gRPC on mlp, measured in one run.

Usage: python scripts/loop_bench.py [--window-ms 3000] [--rounds 2]

At c = 1 on `mlp_off` (no batching) and c = 32 on `mlp_on` (the seed's batching), as
scripts/hotpath_bench.py serves them, perf_analyzer (`-b 1 -s 999`) keeps each server busy, A B
B A per round, while this script reads, over the same seconds:

- each thread's CPU time from /proc: the event loop's thread (the main one) apart from the
  others (gRPC's event engine, ONNX Runtime's and the instances' threads), per request served;
- `perf record` on the event loop's thread: each sample goes to the library its instruction is
  in (the interpreter, the kernel, gRPC's core, ONNX Runtime, ...), and a library's share of
  the samples times the thread's CPU per request is its microseconds.

Both servers run their loop on one thread; when that thread is busy all the time, its CPU per
request sets the rate, so the two servers' rates stand as the inverse of their loop's CPU per
request. The split says which libraries the difference is spent in. `perf` needs permission
to record (root, or kernel.perf_event_paranoid <= 1); without it only the threads are shown.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.bench_drivers import library_row, perf_analyzer_command, server_process
from scripts.bench_runs import CONVOY_LINE, GRPC_LINE
from scripts.hotpath_bench import LEVELS, build_repository, server_commands

# The libraries a sample's instruction may be in, by a part of the file's name; the first that
# matches names it.
LIBRARIES: tuple[tuple[str, str], ...] = (
    ("the interpreter", "libpython"),
    ("the kernel", "[kernel"),
    ("gRPC's core", "cygrpc"),
    ("ONNX Runtime", "onnxruntime"),
    ("libc", "libc."),
    ("uvloop", "uvloop"),
    ("protobuf", "_message"),
    ("NumPy", "numpy"),
    ("asyncio's C part", "_asyncio"),
)
OTHER = "other"
LIBRARY_NAMES = (*(name for name, _ in LIBRARIES), OTHER)
SAMPLES_PER_S = 999
LOOP = "event loop's thread"
OTHERS = "other threads"


def thread_ticks(pid: int) -> dict[int, int]:
    """CPU clock ticks (user + system) of each thread of `pid`, by thread id."""
    ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            line = Path(f"/proc/{pid}/task/{tid}/stat").read_text(encoding="ascii")
        except OSError:  # the thread ended meanwhile
            continue
        fields = line[line.rindex(")") + 2 :].split()
        ticks[int(tid)] = int(fields[11]) + int(fields[12])
    return ticks


def split_threads(
    before: Mapping[int, int], after: Mapping[int, int], loop_tid: int
) -> tuple[int, int]:
    """Ticks spent between two readings by the loop's thread and by all the others (a thread
    that started meanwhile counts from zero; one that ended is lost, as /proc no longer has it)."""
    spent = {tid: ticks - before.get(tid, 0) for tid, ticks in after.items()}
    loop = spent.pop(loop_tid, 0)
    return loop, sum(spent.values())


def library_shares(samples: Iterable[str]) -> dict[str, float]:
    """Each library's share of the samples, from `perf script -F ip,dso`'s lines (an address,
    then the file in parentheses)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in samples:
        _, paren, path = line.partition("(")
        if paren:
            counts[library_row(path.rstrip().removesuffix(")"), LIBRARIES, OTHER)] += 1
    total = sum(counts.values())
    return {name: counts[name] / total if total else 0.0 for name in LIBRARY_NAMES}


@dataclass(frozen=True, slots=True)
class Reading:
    """One server under load, per request served: its threads' CPU and where its loop spent it."""

    infer_per_s: float
    loop_us: float
    others_us: float
    loop_busy: float  # the loop thread's CPU seconds over wall seconds
    libraries_us: dict[str, float] | None  # None: perf could not record


def read(pid: int, load: Sequence[str], csv_path: Path, seconds: float, scratch: Path) -> Reading:
    """`pid` (its main thread running the loop) read for `seconds` while `load`, a
    perf_analyzer command writing `csv_path`, keeps it busy."""
    csv_path.unlink(missing_ok=True)
    data = scratch / "loop.data"
    data.unlink(missing_ok=True)
    process = subprocess.Popen(load, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(seconds / 2)  # past perf_analyzer's warm-up
    before, start = thread_ticks(pid), time.monotonic()
    perf = shutil.which("perf")
    if perf:
        command = [perf, "record", "-q", "-F", str(SAMPLES_PER_S), "-t", str(pid)]
        subprocess.run([*command, "-o", str(data), "--", "sleep", str(seconds)], check=False)
    else:
        time.sleep(seconds)
    after, wall = thread_ticks(pid), time.monotonic() - start
    process.wait()
    with csv_path.open(newline="") as f:
        infer_per_s = float(next(csv.DictReader(f))["Inferences/Second"])
    loop, others = split_threads(before, after, pid)
    hz, served = os.sysconf("SC_CLK_TCK"), infer_per_s * wall
    loop_us, others_us = loop / hz / served * 1e6, others / hz / served * 1e6
    libraries = None
    if perf and data.exists():
        done = subprocess.run(
            [perf, "script", "-i", str(data), "-F", "ip,dso"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0 and done.stdout.strip():
            shares = library_shares(done.stdout.splitlines())
            libraries = {name: share * loop_us for name, share in shares.items()}
    return Reading(infer_per_s, loop_us, others_us, loop / hz / wall, libraries)


def mean(readings: Sequence[Reading]) -> Reading:
    def avg(values: Iterable[float]) -> float:
        listed = list(values)
        return sum(listed) / len(listed)

    split = [r.libraries_us for r in readings if r.libraries_us is not None]
    return Reading(
        avg(r.infer_per_s for r in readings),
        avg(r.loop_us for r in readings),
        avg(r.others_us for r in readings),
        avg(r.loop_busy for r in readings),
        {name: avg(s[name] for s in split) for name in LIBRARY_NAMES} if split else None,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds per level")
    args = parser.parse_args(argv)
    if not shutil.which("perf"):
        print("loop_bench: no perf on PATH: threads only", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="loop-") as scratch_dir:
        scratch = Path(scratch_dir)
        convoy, canned = server_commands(build_repository(scratch))
        columns: list[tuple[str, Reading]] = []
        with (
            server_process(canned, scratch / "canned.log", GRPC_LINE) as (bare_pid, (bare,)),
            server_process(convoy, scratch / "convoy.log", CONVOY_LINE) as (pid, (port, _)),
        ):
            servers = {"Convoy": (pid, port, None), "bare": (bare_pid, bare, "mlp_on")}
            seconds = 3 * args.window_ms / 1000 / 2
            for c, model in LEVELS:
                readings: dict[str, list[Reading]] = {"Convoy": [], "bare": []}
                for _ in range(args.rounds):
                    for name in ("Convoy", "bare", "bare", "Convoy"):
                        server_pid, server_port, served = servers[name]
                        csv_path = scratch / "pa.csv"
                        load = perf_analyzer_command(
                            f"127.0.0.1:{server_port}",
                            served or model,
                            c,
                            args.window_ms,
                            csv_path,
                            "grpc",
                        )
                        reading = read(server_pid, load, csv_path, seconds, scratch)
                        readings[name].append(reading)
                        print(f"c={c} {name}: {_line(reading)}", flush=True)
                columns += [(f"{name}, c = {c}", mean(readings[name])) for name in readings]
        _print_table(columns)


def _line(reading: Reading) -> str:
    return (
        f"{reading.infer_per_s:,.0f} infer/s, loop {reading.loop_us:.0f} us/req "
        f"(busy {reading.loop_busy:.0%}), other threads {reading.others_us:.0f} us/req"
    )


def _print_table(columns: Sequence[tuple[str, Reading]]) -> None:
    print("\n| per request, us | " + " | ".join(name for name, _ in columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    print("| infer/s | " + " | ".join(f"{r.infer_per_s:,.0f}" for _, r in columns) + " |")
    if all(r.libraries_us is not None for _, r in columns):
        for library in LIBRARY_NAMES:
            cells = [f"{(r.libraries_us or {})[library]:.1f}" for _, r in columns]
            print(f"| {LOOP}: {library} | " + " | ".join(cells) + " |")
    print(f"| {LOOP}, all | " + " | ".join(f"{r.loop_us:.0f}" for _, r in columns) + " |")
    print(f"| {LOOP}, busy | " + " | ".join(f"{r.loop_busy:.0%}" for _, r in columns) + " |")
    print(f"| {OTHERS} | " + " | ".join(f"{r.others_us:.0f}" for _, r in columns) + " |")


if __name__ == "__main__":
    main()
