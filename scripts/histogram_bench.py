"""What Triton's latency histograms cost: mlp with the seed's batching (preferred [8, 16], 2 ms)
at c = 32 over unary gRPC (perf_analyzer, `-b 1`), against the same server with them off.

Two servers run side by side, A with `--metrics-config histogram_latencies=false` (no histogram
at all) and B with `histogram_latencies=true` (Triton's first-response and five phase
histograms, and Convoy's two), and each round measures A B B A, so that drift on a shared
machine falls on both alike. B's page is checked for the families before measuring. Prints each
run, then B over A: throughput, p99 and server CPU per request (the process's CPU time from
/proc over the requests served).

On a busy machine those move by more than the histograms cost, so the script also times what
they add to a request in this process (ModelStats' record_success, and record_execution shared by
a batch of 16), with and without histograms, interleaved, the fastest of many repeats each, and
prints it as a share of B's CPU per request.

Usage: python scripts/histogram_bench.py [--window-ms 3000] [--concurrency 32] [--rounds 1]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import timeit
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from batching import ExecutionRecord, RequestResult
from proto import model_config_pb2 as mc
from scripts.bench_drivers import CpuMeter, Run, run_perf_analyzer, server_process
from scripts.hotpath_bench import build_repository
from server.core.observability.histograms import LatencyHistograms
from server.core.observability.stats import ModelStats

MODEL = "mlp_on"
# The serving line: gRPC, metrics and HTTP ports.
SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+), metrics on :(\d+)/metrics, HTTP on :(\d+)")
FAMILIES = (
    "nv_inference_first_response_histogram_ms",
    "nv_inference_request_duration_histogram_us",
    "nv_inference_queue_duration_histogram_us",
    "nv_inference_compute_input_duration_histogram_us",
    "nv_inference_compute_infer_duration_histogram_us",
    "nv_inference_compute_output_duration_histogram_us",
)


def _check_exported(metrics_port: int, expected: bool) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as page:
        text = page.read().decode()
    for family in FAMILIES:
        found = f'{family}_count{{model="{MODEL}",version="1"}}' in text
        if found != expected:
            raise SystemExit(f"{family} {'missing' if expected else 'exported'} on this server")


def observe_cost_us(batch: int = 16, calls: int = 100_000, repeats: int = 15) -> float:
    """Microseconds the histograms add to one request's statistics: record_success, and
    record_execution over `batch` requests; off and on interleaved, the fastest repeat each."""
    result = RequestResult({}, 120_000, 20_000, 900_000, 30_000, batch, "instance")
    record = ExecutionRecord(batch, batch, 20_000, 900_000, 30_000, succeeded=True)
    off, on = ModelStats(), ModelStats()
    on.latency = LatencyHistograms.from_config(mc.ModelConfig(name=MODEL))
    best = {id(off): float("inf"), id(on): float("inf")}
    for _ in range(repeats):
        for stats in (off, on):

            def request(stats: ModelStats = stats) -> None:
                stats.record_success(result, 1_500_000)

            def execution(stats: ModelStats = stats) -> None:
                stats.record_execution(record)

            seconds = timeit.timeit(request, number=calls)
            seconds += timeit.timeit(execution, number=calls // batch)
            best[id(stats)] = min(best[id(stats)], seconds / calls * 1e6)
    return best[id(on)] - best[id(off)]


def _line(label: str, run: Run) -> str:
    measured = run.measured
    if measured is None:
        return f"{label}: failed"
    cpu = "-" if run.server_cpu is None else f"{run.server_cpu:.2f} cores"
    return (
        f"{label}: {measured.infer_per_s:8.1f} infer/s  p50 {measured.p50_ms:6.2f} ms  "
        f"p99 {measured.p99_ms:6.2f} ms  server CPU {cpu}"
    )


def _per_request_us(runs: list[Run]) -> float:
    """Server CPU microseconds per request, over the runs."""
    values = [
        r.server_cpu / r.measured.infer_per_s * 1e6
        for r in runs
        if r.measured is not None and r.server_cpu is not None and r.measured.infer_per_s > 0
    ]
    return statistics.fmean(values) if values else float("nan")


def _mean(runs: list[Run], field: str) -> float:
    values = [getattr(r.measured, field) for r in runs if r.measured is not None]
    return statistics.fmean(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="A B B A rounds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="histogram-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        repo = build_repository(scratch)
        convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        off = [*convoy, "--metrics-config", "histogram_latencies=false"]
        on = [*convoy, "--metrics-config", "histogram_latencies=true"]
        runs: dict[str, list[Run]] = {"A": [], "B": []}
        with (
            server_process(off, scratch / "off.log", SERVING) as (off_pid, off_ports),
            server_process(on, scratch / "on.log", SERVING) as (on_pid, on_ports),
        ):
            servers = {"A": (off_pid, off_ports[0]), "B": (on_pid, on_ports[0])}

            def run(which: str) -> None:
                pid, grpc_port = servers[which]
                csv_path = scratch / "pa.csv"
                csv_path.unlink(missing_ok=True)
                url = f"127.0.0.1:{grpc_port}"
                measured = run_perf_analyzer(
                    url, MODEL, args.concurrency, args.window_ms, csv_path, "grpc", CpuMeter(pid)
                )
                runs[which].append(measured)
                name = "histograms off" if which == "A" else "histograms on "
                print(_line(f"{which} {name}", measured), flush=True)

            for _ in range(args.rounds):
                for which in "ABBA":
                    run(which)
            _check_exported(on_ports[1], expected=True)
            _check_exported(off_ports[1], expected=False)
        a_rate, b_rate = _mean(runs["A"], "infer_per_s"), _mean(runs["B"], "infer_per_s")
        a_p99, b_p99 = _mean(runs["A"], "p99_ms"), _mean(runs["B"], "p99_ms")
        a_cpu, b_cpu = _per_request_us(runs["A"]), _per_request_us(runs["B"])
        print(
            f"mlp c={args.concurrency}: B/A throughput {b_rate / a_rate:.3f} "
            f"({a_rate:.0f} -> {b_rate:.0f} infer/s), p99 {a_p99:.2f} -> {b_p99:.2f} ms, "
            f"server CPU per request {a_cpu:.0f} -> {b_cpu:.0f} us"
        )
    added_us = observe_cost_us()
    print(
        f"the histograms add {added_us:.2f} us of CPU per request in process, "
        f"{added_us / b_cpu:.2%} of B's {b_cpu:.0f} us per request"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
