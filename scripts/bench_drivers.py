"""The load generators and meters scripts/bench.py runs: server processes, perf_analyzer, wrk,
the process tree's CPU time, and the in-process ONNX Runtime ceiling.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from scripts.bench_results import Measurement

REPO_ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = REPO_ROOT / "scripts" / "perf_analyzer.sh"
WRK_SCRIPT = REPO_ROOT / "scripts" / "wrk_post.lua"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
TRIALS = 3  # perf_analyzer's -r; wrk measures as long as these windows together
WRK_WARMUP_S = 1
WRK_TIMEOUT_S = 30  # per request: resnet18 at concurrency 32 waits seconds for a naive server


def warn(message: str) -> None:
    print(f"bench: missing: {message}", file=sys.stderr, flush=True)


@contextmanager
def server_process(
    command: Sequence[str],
    log_path: Path,
    line: re.Pattern[str],
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[int, tuple[int, ...]]]:
    """Run `command` with its output to `log_path`; yield its pid and the ports its log `line`
    names, then SIGTERM it. Raises RuntimeError if it exits or never logs `line`."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command), cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:
        ports = _wait_for_ports(process, log_path, line)
        if ports is None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"{shlex.join(command)} did not start:\n{tail}")
        yield process.pid, ports
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for_ports(
    process: subprocess.Popen[bytes], log_path: Path, line: re.Pattern[str]
) -> tuple[int, ...] | None:
    deadline_s = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline_s and process.poll() is None:
        match = line.search(log_path.read_text(encoding="utf-8", errors="replace"))
        if match:
            return tuple(int(port) for port in match.groups())
        time.sleep(0.1)
    return None


def process_tree(stats: Mapping[int, str], root: int) -> list[int]:
    """`root` and all its descendants (none when it is gone), from their /proc/<pid>/stat
    lines."""
    children: dict[int, list[int]] = {}
    for pid, line in stats.items():
        children.setdefault(int(_stat_fields(line)[1]), []).append(pid)
    tree, todo = [], [root] if root in stats else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_pids(root: int) -> list[int]:
    """The processes of `root`'s tree now (a server and its workers)."""
    return process_tree(_proc_stats(), root)


def tree_cpu_ticks(stats: Mapping[int, str], root: int) -> int:
    """CPU clock ticks of `root` and all its descendants, from their /proc/<pid>/stat lines:
    utime + stime of each, plus cutime + cstime (the children it has reaped), so a child that
    exited within the tree still counts."""
    return sum(
        sum(int(x) for x in _stat_fields(stats[pid])[11:15]) for pid in process_tree(stats, root)
    )


def _stat_fields(line: str) -> list[str]:
    """A /proc/<pid>/stat line's fields after the command name, which, in parentheses, may hold
    spaces: field 1 is the parent's pid, 11 and 12 the process's user and system ticks."""
    return line[line.rindex(")") + 2 :].split()


def _proc_stats() -> dict[int, str]:
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            # A process may exit while we read /proc.
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                stats[int(entry.name)] = Path(entry.path, "stat").read_text(encoding="ascii")
    return stats


@dataclass(frozen=True, slots=True)
class CpuMeter:
    """The CPU time of a process tree (a server and its workers) over a stretch of wall time."""

    pid: int

    def seconds(self) -> float:
        return tree_cpu_ticks(_proc_stats(), self.pid) / os.sysconf("SC_CLK_TCK")

    def own_seconds(self) -> float:
        """The CPU time of the root process alone, its workers left out."""
        fields = _stat_fields(Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii"))
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Run:
    """What a load generator measured, and the server's CPU share while it measured."""

    measured: Measurement | None  # None: the run failed (a warning says why)
    server_cpu: float | None  # CpuMeter's CPU seconds / wall seconds; None without a meter


def _metered(meter: CpuMeter | None, command: Callable[[], Measurement | None]) -> Run:
    if meter is None:
        return Run(command(), None)
    cpu_s, wall_s = meter.seconds(), time.monotonic()
    measured = command()
    return Run(measured, (meter.seconds() - cpu_s) / (time.monotonic() - wall_s))


def perf_analyzer_command(
    url: str,
    model: str,
    concurrency: int,
    window_ms: int,
    csv_path: Path,
    front_end: str,
    *,
    shared_memory: bool = False,
    trials: int = TRIALS,
    input_data: Path | None = None,
) -> list[str]:
    """perf_analyzer's command line for one closed-loop measurement, batch 1 per request;
    `input_data`: a JSON file of the requests' data (perf_analyzer's own data otherwise)."""
    return [
        str(PERF_ANALYZER),
        *("-m", model, "-u", url, "-f", str(csv_path), "-b", "1"),
        *("-i", "http" if front_end == "http" else "grpc"),
        *(["--streaming"] if front_end == "stream" else []),
        *(["--shared-memory=system"] if shared_memory else []),
        *([f"--input-data={input_data}"] if input_data else []),
        f"--concurrency-range={concurrency}:{concurrency}",
        f"--measurement-interval={window_ms}",
        # `trials` windows, always accepted: the same work for every system on a shared machine.
        *("-r", str(trials), "-s", "999"),
    ]


def run_perf_analyzer(
    url: str,
    model: str,
    concurrency: int,
    window_ms: int,
    csv_path: Path,
    front_end: str,
    meter: CpuMeter | None = None,
    shared_memory: bool = False,
    input_data: Path | None = None,
) -> Run:
    """One closed-loop measurement, batch 1 per request, as issue 13 ran every gRPC system;
    `front_end` is grpc (unary), stream (gRPC streaming) or http (binary tensors). With
    `shared_memory`, inputs and outputs travel through system shared memory regions that
    perf_analyzer registers, and requests carry only their location."""
    command = perf_analyzer_command(
        url,
        model,
        concurrency,
        window_ms,
        csv_path,
        front_end,
        shared_memory=shared_memory,
        input_data=input_data,
    )
    timeout_s = 60 + 3 * TRIALS * window_ms / 1000
    # The server's address too: two servers may serve a model of the same name (Triton beside
    # Convoy in scripts/python_bench.py).
    what = f"{model} at {url} {front_end}{' shm' if shared_memory else ''} @{concurrency}"

    def measure() -> Measurement | None:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            warn(f"{what}: perf_analyzer ran past {timeout_s:.0f} s")
            return None
        if done.returncode != 0 or not csv_path.exists():
            last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
            warn(f"{what}: perf_analyzer failed (exit {done.returncode}): {last[0]}")
            return None
        with csv_path.open(newline="") as f:
            row = next(csv.DictReader(f))
        return Measurement(
            infer_per_s=float(row["Inferences/Second"]),
            p50_ms=float(row["p50 latency"]) / 1000,
            p99_ms=float(row["p99 latency"]) / 1000,
        )

    return _metered(meter, measure)


def library_row(path: str, libraries: Sequence[tuple[str, str]], other: str) -> str:
    """The row a profiler's sample counts in, by the file its instruction is in (`path`, a
    shared library's name or path): the first of `libraries` (row, a part of the file's name)
    whose part it holds; `other` where none does."""
    for row, part in libraries:
        if part in path:
            return row
    return other


def sampled_under_load(
    load: Sequence[str], csv_path: Path, warm_s: float, sampler: Sequence[str]
) -> tuple[subprocess.CompletedProcess[str], float | None]:
    """Run a profiler (`sampler`, its command line) while `load` (perf_analyzer's, writing
    `csv_path`) keeps a server busy, from `warm_s` after the load starts (past its warm-up):
    the profiler's outcome and the load's infer/s (None when it wrote no result)."""
    csv_path.unlink(missing_ok=True)
    process = subprocess.Popen(load, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(warm_s)
    sampled = subprocess.run(sampler, capture_output=True, text=True, check=False)
    process.wait()
    if not csv_path.exists():
        return sampled, None
    with csv_path.open(newline="") as f:
        return sampled, float(next(csv.DictReader(f))["Inferences/Second"])


@dataclass(frozen=True, slots=True)
class WrkTarget:
    """What wrk posts: the bytes of `body_path` to `url`, with `headers` ("Name: value")."""

    url: str
    body_path: Path
    headers: tuple[str, ...]


def run_wrk(
    target: WrkTarget, concurrency: int, window_ms: int, meter: CpuMeter | None = None
) -> Run:
    """Closed loop over HTTP/1.1: `concurrency` connections of one wrk thread, each posting
    back to back; a warm-up run first, then one as long as perf_analyzer's windows together
    (only that one is measured and metered)."""

    def wrk(seconds: int) -> subprocess.CompletedProcess[str]:
        command = ["wrk", "-t", "1", "-c", str(concurrency), "-d", f"{seconds}s"]
        command += ["--timeout", f"{WRK_TIMEOUT_S}s", "-s", str(WRK_SCRIPT)]
        command += [arg for header in target.headers for arg in ("-H", header)]
        env = {**os.environ, "WRK_BODY_FILE": str(target.body_path)}
        timeout_s = seconds + WRK_TIMEOUT_S + 30
        return subprocess.run(
            [*command, target.url], capture_output=True, text=True, env=env, timeout=timeout_s
        )

    what = f"{target.url} @{concurrency}"
    try:
        wrk(WRK_WARMUP_S)
    except FileNotFoundError:
        warn(f"{what}: no wrk on PATH (Debian/Ubuntu: apt-get install wrk)")
        return Run(None, None)
    except subprocess.TimeoutExpired:
        pass  # the measured run says whether the server answers

    def measure() -> Measurement | None:
        try:
            done = wrk(max(1, round(TRIALS * window_ms / 1000)))
        except subprocess.TimeoutExpired:
            warn(f"{what}: wrk did not finish")
            return None
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
            warn(f"{what}: wrk failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
            return None
        totals = json.loads(lines[-1])
        if totals["errors"] or not totals["requests"]:
            warn(f"{what}: {totals['errors']} errors in {totals['requests']} requests")
            return None
        return Measurement(
            infer_per_s=totals["requests"] / (totals["duration_us"] / 1e6),
            p50_ms=totals["p50_us"] / 1000,
            p99_ms=totals["p99_us"] / 1000,
        )

    return _metered(meter, measure)


def measure_ceiling(
    onnx_path: Path, batch_sizes: Sequence[int], window_s: float
) -> dict[int, float]:
    """Inferences/s of one `ort.InferenceSession(path)` (default SessionOptions) per batch size,
    one thread calling `run` back to back for `window_s` after a warm-up run."""
    session = ort.InferenceSession(str(onnx_path))
    meta = session.get_inputs()[0]
    rates = {}
    for batch in batch_sizes:
        feeds = {meta.name: random_input(meta.shape, batch)}
        session.run(None, feeds)  # the first run of a shape allocates
        runs, start_s = 0, time.perf_counter()
        while time.perf_counter() - start_s < window_s:
            session.run(None, feeds)
            runs += 1
        rates[batch] = batch * runs / (time.perf_counter() - start_s)
    return rates


def random_input(shape: Sequence[int], batch: int) -> np.ndarray:
    """FP32 noise of a model input's `shape`, its first (batch) dim set to `batch`."""
    return np.random.default_rng(0).random((batch, *shape[1:]), dtype=np.float32)
