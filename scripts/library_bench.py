"""Where a server's CPU per request goes, library by library: Convoy against the bare grpc.aio
server, both measured in the same run, so that what Convoy adds shows where it is spent.

Usage: python scripts/library_bench.py [--seconds 5] [--rounds 1] [--compare bare|worker|python]

The cases are scripts/hotpath_bench.py's unary gRPC ones, in process: mlp without batching at
c = 1 (`mlp_off`) and with the seed's batching at c = 32 (`mlp_on`), perf_analyzer (`-b 1 -s
999`) keeping each server busy. While it does, `perf record` samples every thread of the
server's process tree (the CPU clock, `--seconds` long), and each sample goes to the library its
instruction lies in: the kernel, the interpreter, gRPC's core, ONNX Runtime (its kernels
included), protobuf, NumPy, uvloop, libc. Each library's samples over the requests served in
the window are its microseconds of CPU per request. Each round measures Convoy, then the bare
server twice, then Convoy again (A B B A), and each cell is the mean of its runs. py-spy's stage
table (hotpath_bench.py) splits the time that holds the GIL by Convoy's stages; this one counts
all CPU, the kernel's and gRPC's threads' included, which is what the CPU target compares.

`--compare worker` sets Convoy with one front-end worker (the worker and the core together)
beside Convoy in process, on the same cases. `--compare python` sets, in one server, the
Triton-style model.py of scripts/python_bench.py (one ONNX Runtime session on one intra-op
thread) in its worker process beside Convoy's ONNX Runtime backend, over unary gRPC at c = 8 and
c = 32 (the Python backend's CPU target compares the two).

Needs `perf` (Debian's `linux-perf`) and the right to sample the server (root, or
kernel.perf_event_paranoid at 1 or less).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts import python_bench
from scripts.bench_drivers import (
    library_row,
    perf_analyzer_command,
    run_perf_analyzer,
    sampled_under_load,
    server_process,
    tree_pids,
)
from scripts.bench_runs import CONVOY_LINE, GRPC_LINE
from scripts.hotpath_bench import build_repository, server_commands

SAMPLES_PER_S = 2999
# (the row's name, a part of the library's file name)
LIBRARIES = (
    ("the kernel", "[kernel"),
    ("the interpreter (libpython)", "libpython"),
    ("gRPC's core (cygrpc)", "cygrpc"),
    ("ONNX Runtime", "onnxruntime"),
    ("protobuf (upb)", "_message"),
    ("NumPy", "_multiarray"),
    ("uvloop", "loop."),
    ("libc", "libc."),
)
OTHER = "the rest"
ROWS = (*(name for name, _ in LIBRARIES), OTHER)

PerLibrary = dict[str, float]  # row -> us of CPU per request


@dataclass(frozen=True, slots=True)
class Side:
    """One of the two compared: a server (its process tree is sampled) and its gRPC address."""

    label: str
    pid: int
    url: str


@dataclass(frozen=True, slots=True)
class Case:
    """One load: perf_analyzer's concurrency, and the model each side is asked for."""

    concurrency: int
    models: tuple[str, str]  # each side's model


CASES = (Case(1, ("mlp_off", "mlp_on")), Case(32, ("mlp_on", "mlp_on")))
PYTHON_CASES = (Case(8, ("mlp_python", "mlp_on")), Case(32, ("mlp_python", "mlp_on")))


def samples_by_library(report: Iterable[str]) -> collections.Counter[str]:
    """Samples per row from `perf report --sort dso -F sample,dso` lines ("  6539  [vdso]")."""
    counts: collections.Counter[str] = collections.Counter()
    for line in report:
        count, _, dso = line.strip().partition(" ")
        if count.isdigit():
            counts[library_row(dso.strip(), LIBRARIES, OTHER)] += int(count)
    return counts


def _measure(
    side: Side, model: str, concurrency: int, seconds: float, scratch: Path
) -> PerLibrary | None:
    """One side's CPU per request by library, under perf_analyzer's load; None if it failed."""
    csv_path, data = scratch / "pa.csv", scratch / "perf.data"
    window_ms = int(seconds * 1000)
    load = perf_analyzer_command(
        side.url, model, concurrency, window_ms, csv_path, "grpc", trials=3
    )
    pids = ",".join(str(pid) for pid in tree_pids(side.pid))
    record = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(SAMPLES_PER_S)]
    record += ["-p", pids, "-o", str(data), "--", "sleep", str(seconds)]
    # From half a window in: past perf_analyzer's warm-up.
    recorded, infer_per_s = sampled_under_load(load, csv_path, seconds / 2, record)
    if recorded.returncode != 0 or infer_per_s is None:
        print(f"library_bench: perf record failed: {recorded.stderr.strip()[-300:]}")
        return None
    report = ["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "-q"]
    report += ["-F", "sample,dso"]
    text = subprocess.run(report, capture_output=True, text=True, check=True).stdout
    requests = infer_per_s * seconds
    counts = samples_by_library(text.splitlines())
    return {row: counts[row] / SAMPLES_PER_S / requests * 1e6 for row in ROWS}


def mean(runs: Sequence[PerLibrary | None]) -> PerLibrary | None:
    good = [run for run in runs if run is not None]
    if not good:
        return None
    return {row: sum(run[row] for run in good) / len(good) for row in ROWS}


Results = dict[int, tuple[PerLibrary | None, PerLibrary | None]]  # concurrency -> both sides
Comparison = tuple[tuple[Side, Side], Sequence[Case]]  # the two sides, the cases


def compare(
    sides: tuple[Side, Side], cases: Sequence[Case], seconds: float, rounds: int, scratch: Path
) -> Results:
    """Each case, A B B A `rounds` times; each side's mean by library."""
    results: Results = {}
    for case in cases:
        for side, model in zip(sides, case.models, strict=True):  # warm both
            run_perf_analyzer(side.url, model, case.concurrency, 1000, scratch / "warm.csv", "grpc")
        runs: tuple[list[PerLibrary | None], list[PerLibrary | None]] = ([], [])
        for _ in range(rounds):
            for index in (0, 1, 1, 0):
                measured = _measure(
                    sides[index], case.models[index], case.concurrency, seconds, scratch
                )
                runs[index].append(measured)
        results[case.concurrency] = (mean(runs[0]), mean(runs[1]))
        print(f"c = {case.concurrency} done", flush=True)
    return results


def table(labels: tuple[str, str], results: Results) -> list[str]:
    """The markdown table: a row per library, both sides' us per request and their difference
    (the first's over the second's) at each concurrency, then the totals."""
    header = "| library |"
    for c in results:
        header += f" {labels[0]}, c = {c} | {labels[1]}, c = {c} | difference |"
    lines = [header, "| --- |" + " --- | --- | --- |" * len(results)]
    for row in (*ROWS, "total"):
        cells = []
        for first, second in results.values():
            if first is None or second is None:
                cells += ["-", "-", "-"]
                continue
            a = sum(first.values()) if row == "total" else first[row]
            b = sum(second.values()) if row == "total" else second[row]
            cells += [f"{a:.1f}", f"{b:.1f}", f"{a - b:+.1f}"]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return lines


def _against_bare(stack: contextlib.ExitStack, scratch: Path) -> Comparison:
    convoy, canned = server_commands(build_repository(scratch))
    bare_pid, (bare,) = stack.enter_context(
        server_process(canned, scratch / "canned.log", GRPC_LINE)
    )
    pid, ports = stack.enter_context(server_process(convoy, scratch / "convoy.log", CONVOY_LINE))
    sides = (
        Side("Convoy", pid, f"127.0.0.1:{ports[0]}"),
        Side("bare", bare_pid, f"127.0.0.1:{bare}"),
    )
    return sides, CASES


def _worker(stack: contextlib.ExitStack, scratch: Path) -> Comparison:
    convoy, _ = server_commands(build_repository(scratch))
    pid, ports = stack.enter_context(server_process(convoy, scratch / "convoy.log", CONVOY_LINE))
    worker_pid, worker_ports = stack.enter_context(
        server_process([*convoy, "--frontend-workers", "1"], scratch / "worker.log", CONVOY_LINE)
    )
    sides = (
        Side("one worker", worker_pid, f"127.0.0.1:{worker_ports[0]}"),
        Side("in process", pid, f"127.0.0.1:{ports[0]}"),
    )
    return sides, tuple(Case(c.concurrency, (c.models[0], c.models[0])) for c in CASES)


def _python(stack: contextlib.ExitStack, scratch: Path) -> Comparison:
    convoy, _ = server_commands(python_bench.build_repository(scratch, one_thread=True))
    pid, ports = stack.enter_context(server_process(convoy, scratch / "convoy.log", CONVOY_LINE))
    url = f"127.0.0.1:{ports[0]}"
    return (Side("model.py in a worker", pid, url), Side("ONNX backend", pid, url)), PYTHON_CASES


COMPARISONS = {"bare": _against_bare, "worker": _worker, "python": _python}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="perf's window per run")
    parser.add_argument("--rounds", type=int, default=1, help="A B B A rounds per case")
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="bare")
    args = parser.parse_args(argv)
    if shutil.which("perf") is None:
        sys.exit("library_bench: needs perf (apt-get install linux-perf)")
    with tempfile.TemporaryDirectory(prefix="library-") as scratch_dir:
        scratch = Path(scratch_dir)
        with contextlib.ExitStack() as stack:
            sides, cases = COMPARISONS[args.compare](stack, scratch)
            results = compare(sides, cases, args.seconds, args.rounds, scratch)
        print("\nCPU per request, us, by library (perf, every thread of each server's tree):\n")
        print("\n".join(table((sides[0].label, sides[1].label), results)))


if __name__ == "__main__":
    main()
