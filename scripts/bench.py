"""Convoy's serving benchmark: what dynamic batching buys, measured against a limit and a control.

For each model (mlp, resnet18) it serves variants of one ONNX file from one Convoy process and
drives each with NVIDIA's perf_analyzer (gRPC, closed loop, one request of batch 1 per client):
`off` (one request per execution), `on` (Triton's dynamic batcher, max queue delay 2 ms) and, for
mlp, `adaptive` (`on` plus `convoy_adaptive_queue_delay`). ModelStatistics before and after each
run give the average batch size. The limit is ONNX Runtime's own throughput in this process at
its best batch size, with the server's session settings and instance count; with
`--baseline fastapi` the control group is a naive FastAPI app (scripts/fastapi_baseline.py: JSON
in and out, one `session.run` per request) under an aiohttp load generator. Every ratio printed
comes from this one run, on this machine; measurements run one at a time.

Reproduce from a clean clone (Linux x86_64; perf_analyzer is downloaded on first use):

    scripts/test.sh                              # creates .venv with the dev extra
    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python scripts/bench.py --baseline fastapi --out results.json

Options: --models mlp,resnet18  --concurrency 1,8,32  --window-ms 2000 (perf_analyzer's
measurement interval)  --streaming / --http (the `on` variant again over gRPC streaming / over
HTTP/REST with binary tensors). A failed measurement (e.g. perf_analyzer finds no stable window)
is shown as `-` and the run goes on. On a GPU machine (scripts/gpu_check.sh): --gpu serves every
variant with KIND_GPU instances (the in-process limit, a CPU figure, is then skipped),
--instances N sets the instance count of every variant, --nvml adds each row's mean GPU
utilization, sampled through NVML while perf_analyzer runs.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/bench.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import numpy as np
import onnx
import onnxruntime as ort
import tritonclient.grpc as grpcclient

from scripts import models
from scripts.fastapi_baseline import closed_loop, json_body, open_sessions

REPO_ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = REPO_ROOT / "scripts" / "perf_analyzer.sh"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
LIMIT_WINDOW_S = 2.0  # per batch size
HTTP_WARMUP_S = 1.0
HTTP_WINDOW_S = 5.0
CONVOY_LINE = re.compile(r"serving gRPC on [\d.]+:(\d+).*HTTP on :(\d+)")
FASTAPI_LINE = re.compile(r"serving HTTP on [\d.]+:(\d+)")
ORDER = ("off", "on", "adaptive", "stream", "http", "fastapi")  # rows in table order
ADAPTIVE = 'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "true" } }\n'
# Each spec's one instance group, as its config writes it: count and kind.
INSTANCE_GROUP = re.compile(r"^instance_group \[ \{ count: (\d+) kind: (\w+) \} \]$", re.MULTILINE)
NVML_PERIOD_S = 0.1


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One benchmarked model: its file, the config shared by its variants, and what to try."""

    name: str  # variant `<name>_<batching>` serves the same file under `<name>.onnx`
    build: Callable[[], onnx.ModelProto]
    config: str  # config.pbtxt of the `off` variant, without `name`
    dynamic_batching: str  # the block added for `on` and `adaptive`
    batchings: tuple[str, ...]  # the variants served
    limit_batch_sizes: tuple[int, ...]  # batch sizes the in-process limit tries


SPECS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(
        name="mlp",
        build=models.mlp,
        config="""\
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
        dynamic_batching="dynamic_batching { max_queue_delay_microseconds: 2000 }\n",
        batchings=("off", "on", "adaptive"),
        limit_batch_sizes=(1, 8, 32, 64),
    ),
    # Two instances of one intra-op thread each: the best served throughput on 2 cores. In
    # process every layout reaches about 46 img/s (batching hardly helps a CPU conv net), but
    # served, `on` @32 gave 43.7-44.6 infer/s with 2 x 1 thread against 39.3-39.7 with 1 x 2:
    # one instance computes while the other's batch is assembled and answered, and
    # single-threaded sessions spin no thread pool that takes CPU from the event loop and
    # perf_analyzer. The price is concurrency 1, where one request gets one core (about 20
    # against 37 infer/s). 2 x 2 threads oversubscribes the cores (29 infer/s `off` @32).
    "resnet18": ModelSpec(
        name="resnet18",
        build=models.resnet18,
        config="""\
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
""",
        dynamic_batching="""\
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 2000
}
""",
        batchings=("off", "on"),
        limit_batch_sizes=(1, 8, 16, 32),
    ),
}


@dataclass(frozen=True, slots=True)
class Measurement:
    """Closed-loop throughput and latency of one model variant at one concurrency."""

    infer_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class Row:
    """One table line; `measured` is None when the measurement failed."""

    model: str
    batching: str  # off, on, adaptive (Convoy) or fastapi
    concurrency: int  # requests in flight
    measured: Measurement | None
    avg_batch: float | None  # inferences per execution; None for fastapi or when unknown
    gpu_utilization: float | None = None  # mean over the run, 0.0 - 1.0; None without --nvml


@dataclass(frozen=True, slots=True)
class Limit:
    """In-process ONNX Runtime throughput per batch size, with the served session settings."""

    model: str
    instances: int  # sessions, each run by its own thread
    infer_per_s_by_batch: dict[int, float]

    @property
    def best_infer_per_s(self) -> float:
        return max(self.infer_per_s_by_batch.values())


@dataclass(frozen=True, slots=True)
class Machine:
    """Where the numbers come from."""

    cpu: str
    cores: int
    python: str
    onnxruntime: str
    convoy: str
    load_average_before: tuple[float, float, float]  # over 1, 5 and 15 minutes

    @classmethod
    def read(cls, load_average: tuple[float, float, float]) -> Machine:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        cpu = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        return cls(
            cpu=cpu.group(1) if cpu else platform.processor(),
            cores=os.cpu_count() or 0,
            python=platform.python_version(),
            onnxruntime=ort.__version__,
            convoy=_installed_version("convoy"),
            load_average_before=load_average,
        )

    def line(self) -> str:
        load = " ".join(f"{x:.2f}" for x in self.load_average_before)
        return (
            f"machine: {self.cpu}, {self.cores} cores, python {self.python}, "
            f"onnxruntime {self.onnxruntime}, convoy {self.convoy}, "
            f"load average before the run {load}"
        )


@dataclass(frozen=True, slots=True)
class Placing:
    """Where the served variants' instances run: the spec's own groups, or `count` of `kind`."""

    kind: str = ""  # e.g. KIND_GPU; empty keeps each spec's instance_group
    count: int = 0  # instances per variant; 0 keeps the spec's count


def _installed_version(distribution: str) -> str:
    # scripts/gpu_check.sh runs from the source tree without installing convoy.
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+source"


def variant_config(spec: ModelSpec, batching: str, placing: Placing = Placing()) -> str:
    config = f'name: "{spec.name}_{batching}"\n{spec.config}'
    found = INSTANCE_GROUP.search(config)
    if found is not None and (placing.kind or placing.count):
        count, kind = placing.count or found[1], placing.kind or found[2]
        config = INSTANCE_GROUP.sub(f"instance_group [ {{ count: {count} kind: {kind} }} ]", config)
    if batching != "off":
        config += spec.dynamic_batching
    if batching == "adaptive":
        config += ADAPTIVE
    return config


def build_repository(root: Path, specs: Sequence[ModelSpec], placing: Placing = Placing()) -> Path:
    """Write each ONNX file once under `root` and link it into every variant's model dir."""
    repo = root / "repository"
    for spec in specs:
        onnx_path = root / f"{spec.name}.onnx"
        onnx.save_model(spec.build(), onnx_path)
        for batching in spec.batchings:
            name = f"{spec.name}_{batching}"
            model_dir = models.write_model(
                repo, name, None, variant_config(spec, batching, placing)
            )
            (model_dir / "1").mkdir()
            (model_dir / "1" / "model.onnx").symlink_to(onnx_path)
    return repo


def random_input(session: ort.InferenceSession, batch: int) -> dict[str, np.ndarray]:
    meta = session.get_inputs()[0]
    shape = (batch, *meta.shape[1:])
    return {meta.name: np.random.default_rng(0).random(shape, dtype=np.float32)}


def measure_limit(spec: ModelSpec, model_dir: Path) -> Limit:
    sessions = open_sessions(model_dir)
    by_batch = {b: _ort_rate(sessions, b) for b in spec.limit_batch_sizes}
    return Limit(spec.name, len(sessions), by_batch)


def _ort_rate(sessions: list[ort.InferenceSession], batch: int) -> float:
    """Inferences per second with every session run back to back by its own thread."""
    feeds = random_input(sessions[0], batch)
    for session in sessions:
        session.run(None, feeds)  # warm-up: first runs allocate
    runs = [0] * len(sessions)
    start_s = time.perf_counter()
    end_s = start_s + LIMIT_WINDOW_S

    def loop(index: int) -> None:
        while time.perf_counter() < end_s:
            sessions[index].run(None, feeds)
            runs[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(sessions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return batch * sum(runs) / (time.perf_counter() - start_s)


@contextmanager
def server_process(
    command: list[str], log_path: Path, line: re.Pattern[str]
) -> Iterator[tuple[int, ...]]:
    """Run `command` with stderr to `log_path`, yield the ports its `line` names, then SIGTERM."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        ports = _wait_for_ports(process, log_path, line)
        if ports is None:
            tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
            raise RuntimeError(f"{shlex.join(command)} did not start:\n{tail}")
        yield ports
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


def run_perf_analyzer(
    url: str,
    model: str,
    concurrency: int,
    window_ms: int,
    csv_path: Path,
    front_end: str = "grpc",
) -> Measurement | None:
    """One measurement; `front_end` is grpc (unary), stream (gRPC streaming) or http."""
    command = [
        str(PERF_ANALYZER),
        *("-m", model, "-u", url, "-f", str(csv_path)),
        *("-i", "http" if front_end == "http" else "grpc"),
        *(["--streaming"] if front_end == "stream" else []),
        f"--concurrency-range={concurrency}",
        f"--measurement-interval={window_ms}",
        # Stabilize on the median: a shared 2-core box moves p99 too much for 3 windows in a row
        # to agree within 25 %.
        "--percentile=50",
        "--stability-percentage=25",
        "--max-trials=10",
    ]
    timeout_s = 30 + 12 * window_ms / 1000
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _warn(f"{model} @{concurrency}: perf_analyzer ran past {timeout_s:.0f} s")
        return None
    if done.returncode != 0 or not csv_path.exists():
        last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        _warn(f"{model} @{concurrency}: perf_analyzer failed (exit {done.returncode}): {last[0]}")
        return None
    with csv_path.open(newline="") as f:
        row = next(csv.DictReader(f))
    return Measurement(
        infer_per_s=float(row["Inferences/Second"]),
        p50_ms=float(row["p50 latency"]) / 1000,
        p99_ms=float(row["p99 latency"]) / 1000,
    )


def batch_counts(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of the model's version 1."""
    stats = client.get_inference_statistics(model_name=model).model_stats[0]
    return int(stats.inference_count), int(stats.execution_count)


def measure_convoy(
    ports: tuple[int, int],
    specs: Sequence[ModelSpec],
    concurrencies: Sequence[int],
    window_ms: int,
    scratch: Path,
    front_ends: Sequence[str] = (),
    *,
    gpus: GpuUtilization | None = None,
) -> list[Row]:
    """Every variant over unary gRPC, then `on` once more over each extra front end (`stream`:
    ModelStreamInfer, `http`: HTTP/REST with binary tensors), each a row of its own; with `gpus`,
    each row also has the GPUs' mean utilization during its run."""
    url = f"127.0.0.1:{ports[0]}"
    urls = {"grpc": url, "stream": url, "http": f"127.0.0.1:{ports[1]}"}
    client = grpcclient.InferenceServerClient(url)
    rows: list[Row] = []
    for spec in specs:
        runs = [(b, f"{spec.name}_{b}", "grpc") for b in spec.batchings]
        runs += [(front_end, f"{spec.name}_on", front_end) for front_end in front_ends]
        for batching, model, front_end in runs:
            for concurrency in concurrencies:
                inferences_0, executions_0 = batch_counts(client, model)
                csv_path = scratch / f"{batching}_{model}_{concurrency}.csv"
                with gpus.sampling() if gpus else nullcontext([]) as utilization:
                    measured = run_perf_analyzer(
                        urls[front_end], model, concurrency, window_ms, csv_path, front_end
                    )
                inferences_1, executions_1 = batch_counts(client, model)
                executions = executions_1 - executions_0
                avg_batch = (inferences_1 - inferences_0) / executions if executions else None
                busy = sum(utilization) / len(utilization) if utilization else None
                rows.append(Row(spec.name, batching, concurrency, measured, avg_batch, busy))
                _progress(rows[-1])
    client.close()
    return rows


class GpuUtilization:
    """Every GPU's utilization through NVML (nvidia-ml-py), sampled on a thread while a
    measurement runs."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self.names = [str(pynvml.nvmlDeviceGetName(h)) for h in self._handles]

    @contextmanager
    def sampling(self) -> Iterator[list[float]]:
        """Yields the list the samples (mean over the GPUs, 0.0 - 1.0) accumulate in."""
        samples: list[float] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(NVML_PERIOD_S):
                rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
                samples.append(sum(rates) / len(rates) / 100 if rates else 0.0)

        thread = threading.Thread(target=sample, name="nvml", daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join()


def _measure_http(url: str, body: bytes, concurrency: int) -> Measurement | None:
    try:
        latencies_ns = asyncio.run(
            closed_loop(url, body, concurrency, HTTP_WARMUP_S, HTTP_WINDOW_S)
        )
    except aiohttp.ClientError as error:
        _warn(f"{url} @{concurrency}: {error}")
        return None
    if not latencies_ns:
        _warn(f"{url} @{concurrency}: no reply within the window")
        return None
    p50_ns, p99_ns = np.percentile(latencies_ns, [50, 99])
    return Measurement(len(latencies_ns) / HTTP_WINDOW_S, p50_ns / 1e6, p99_ns / 1e6)


def measure_fastapi(
    repo: Path, specs: Sequence[ModelSpec], concurrencies: Sequence[int], scratch: Path
) -> list[Row]:
    script = REPO_ROOT / "scripts" / "fastapi_baseline.py"
    model_args = [f"--model={s.name}={repo / f'{s.name}_off'}" for s in specs]
    command = [sys.executable, str(script), *model_args]
    rows: list[Row] = []
    with server_process(command, scratch / "fastapi.log", FASTAPI_LINE) as (port,):
        for spec in specs:
            session = open_sessions(repo / f"{spec.name}_off")[0]
            body = json_body(next(iter(random_input(session, 1).values())))
            url = f"http://127.0.0.1:{port}/infer/{spec.name}"
            for concurrency in concurrencies:
                measured = _measure_http(url, body, concurrency)
                rows.append(Row(spec.name, "fastapi", concurrency, measured, None))
                _progress(rows[-1])
    return rows


def ratios(
    rows: Sequence[Row], limits: Sequence[Limit], concurrencies: Sequence[int]
) -> dict[str, float | None]:
    """The headline ratios; None where a measurement they need failed."""
    low, high = min(concurrencies), max(concurrencies)
    measured = {(r.model, r.batching, r.concurrency): r.measured for r in rows}

    def rate(model: str, batching: str, concurrency: int) -> float | None:
        m = measured.get((model, batching, concurrency))
        return m.infer_per_s if m else None

    def p50(model: str, batching: str, concurrency: int) -> float | None:
        m = measured.get((model, batching, concurrency))
        return m.p50_ms if m else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, float | None] = {}
    limit_of = {limit.model: limit for limit in limits}  # none with --gpu
    for model in dict.fromkeys(r.model for r in rows):
        out[f"{model} on/off @{high}"] = ratio(rate(model, "on", high), rate(model, "off", high))
        limit = limit_of.get(model)
        if limit is not None:
            served = [r for c in concurrencies if (r := rate(model, "on", c)) is not None]
            out[f"{model} served/limit"] = ratio(max(served, default=None), limit.best_infer_per_s)
        for front_end in ("stream", "http"):
            if any(r.batching == front_end for r in rows):
                out[f"{model} {front_end}/unary @{high}"] = ratio(
                    rate(model, front_end, high), rate(model, "on", high)
                )
        if any(r.batching == "fastapi" for r in rows):
            fastapi = rate(model, "fastapi", high)
            out[f"{model} on/fastapi @{high}"] = ratio(rate(model, "on", high), fastapi)
    if any(r.batching == "adaptive" for r in rows):
        out[f"mlp adaptive p50 @{low} / off p50 @{low}"] = ratio(
            p50("mlp", "adaptive", low), p50("mlp", "off", low)
        )
        out[f"mlp adaptive infer/s @{high} / on infer/s @{high}"] = ratio(
            rate("mlp", "adaptive", high), rate("mlp", "on", high)
        )
    return out


def _cells(row: Row) -> list[str]:
    m = row.measured
    numbers = [f"{m.infer_per_s:.1f}", f"{m.p50_ms:.2f}", f"{m.p99_ms:.2f}"] if m else ["-"] * 3
    avg_batch = f"{row.avg_batch:.2f}" if row.avg_batch is not None else "-"
    cells = [row.model, row.batching, str(row.concurrency), *numbers, avg_batch]
    if row.gpu_utilization is not None:
        cells.append(f"{row.gpu_utilization:.0%}")
    return cells


def format_table(rows: Sequence[Row]) -> str:
    header = ["model", "batching", "conc", "infer/s", "p50 ms", "p99 ms", "avg batch"]
    if any(r.gpu_utilization is not None for r in rows):
        header.append("gpu util")
    body = [_cells(r) for r in rows]
    lines = [header, *(cells + [""] * (len(header) - len(cells)) for cells in body)]
    widths = [max(len(line[i]) for line in lines) + 2 for i in range(len(header))]
    return "\n".join(
        "".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def format_limits(limits: Sequence[Limit]) -> str:
    return "\n".join(
        f"limit: {limit.model} ({limit.instances} session(s)): "
        + ", ".join(f"batch {b} {rate:.1f}/s" for b, rate in limit.infer_per_s_by_batch.items())
        for limit in limits
    )


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _progress(row: Row) -> None:
    print("  " + " ".join(_cells(row)), file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    print(f"bench: missing: {message}", file=sys.stderr, flush=True)


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(SPECS))
    parser.add_argument("--concurrency", type=_int_list, default=[1, 8, 32])
    parser.add_argument("--window-ms", type=int, default=2000, help="perf_analyzer's window")
    parser.add_argument("--baseline", choices=["fastapi"], help="also measure this control group")
    parser.add_argument(
        "--streaming",
        action="store_true",
        help="also measure the batching variant over ModelStreamInfer (perf_analyzer --streaming)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="also measure the batching variant over HTTP/REST (perf_analyzer -i http)",
    )
    parser.add_argument(
        "--gpu", action="store_true", help="serve every variant with KIND_GPU instances"
    )
    parser.add_argument(
        "--instances", type=int, default=0, help="instances per variant (default: the spec's)"
    )
    parser.add_argument(
        "--nvml", action="store_true", help="sample GPU utilization (NVML) during each run"
    )
    parser.add_argument("--out", type=Path, help="write every number as JSON here")
    args = parser.parse_args(argv)
    unknown = set(args.models) - set(SPECS)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; choose from {sorted(SPECS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_average = os.getloadavg()
    start_s = time.monotonic()
    specs = [SPECS[name] for name in args.models]
    subprocess.run([str(PERF_ANALYZER), "--prepare-only"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="convoy-bench-") as tmp:
        scratch = Path(tmp)
        placing = Placing("KIND_GPU" if args.gpu else "", args.instances)
        repo = build_repository(scratch, specs, placing)
        # Nothing else runs while the limit is measured, nor while either server is. The limit
        # is a CPU session's: with --gpu there is none to compare with.
        limits = [] if args.gpu else [measure_limit(s, repo / f"{s.name}_on") for s in specs]
        gpus = GpuUtilization() if args.nvml else None
        command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        command += ["--grpc-port", "0", "--metrics-port", "0", "--http-port", "0"]
        extra = (["stream"] if args.streaming else []) + (["http"] if args.http else [])
        with server_process(command, scratch / "convoy.log", CONVOY_LINE) as (port, http_port):
            rows = measure_convoy(
                (port, http_port),
                specs,
                args.concurrency,
                args.window_ms,
                scratch,
                extra,
                gpus=gpus,
            )
        if args.baseline == "fastapi":
            rows += measure_fastapi(repo, specs, args.concurrency, scratch)
    rows.sort(key=lambda r: (args.models.index(r.model), r.concurrency, ORDER.index(r.batching)))
    headline = ratios(rows, limits, args.concurrency)
    host = Machine.read(load_average)
    wall_s = time.monotonic() - start_s
    print(format_table(rows))
    print(format_limits(limits))
    print("ratios: " + "; ".join(f"{k} = {_ratio_text(v)}" for k, v in headline.items()))
    print(host.line())
    if gpus is not None:
        print(f"gpus: {', '.join(gpus.names)}; {placing.count or 'spec'} instance(s) per variant")
    print(f"wall time: {wall_s:.0f} s")
    if args.out:
        report = {
            "rows": [asdict(r) for r in rows],
            "limits": [asdict(limit) for limit in limits],
            "ratios": headline,
            "machine": asdict(host),
            "wall_s": wall_s,
            "settings": {
                "window_ms": args.window_ms,
                "concurrency": args.concurrency,
                "gpu": args.gpu,
                "instances": args.instances,
            },
            "gpus": gpus.names if gpus is not None else [],
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
