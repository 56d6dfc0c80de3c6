"""The hot path's stage table: where each microsecond of server CPU per request goes, on mlp,
against the bare grpc.aio server measured in the same run.

Usage: python scripts/hotpath_bench.py [--window-ms 3000] [--cases ...] [--no-profile]
                                      [--pairs 1]

Cases (each at c = 1 on `mlp_off`, mlp without batching, and at c = 32 on `mlp_on`, the seed's
batching: preferred [8, 16], 2 ms): unary gRPC, gRPC streaming and HTTP (binary tensors) with
the in-process front end, and unary gRPC through one front-end worker. Every case is measured
by perf_analyzer (`-b 1 -s 999`, three windows); unary gRPC is measured A B B A against the bare
server (`scripts/canned_grpc.py`: ModelInfer answered with a canned response), `--pairs` times
(each round's ratio is printed when there are several), and each row is the mean of its runs.
Server CPU per request is the process tree's CPU time (from /proc) over the requests served.

Then, unless --no-profile, each Convoy case is measured once more under py-spy (every thread,
not idle, Python frames) and its samples are put into stages by the frames they hold; the
stage's share of the samples times the CPU per request is its microseconds. What no stage
claims is grpc.aio's, uvloop's and the HTTP parser's own work (the "framework" row); the bare
server's CPU per request, measured in the same run, is what that part costs without Convoy.
py-spy needs to attach to the server (root, or ptrace allowed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx

from scripts.bench_drivers import (
    REPO_ROOT,
    CpuMeter,
    Run,
    perf_analyzer_command,
    run_perf_analyzer,
    server_process,
)
from scripts.bench_runs import CONVOY_LINE, GRPC_LINE
from scripts.bench_setup import SPECS, variant_config
from scripts.hotpath_stages import STAGE_NAMES, Stages, profile

# scripts/bench.py's mlp, served without batching and with the seed's batching.
MLP = replace(
    SPECS["mlp"],
    dynamic_batching=(
        "dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 2000 }\n"
    ),
)
CASES = ("grpc", "stream", "http", "grpc-worker")
LEVELS = ((1, "mlp_off"), (32, "mlp_on"))


@dataclass(frozen=True, slots=True)
class Measured:
    """One server at one case: the mean of its measurements."""

    infer_per_s: float
    p50_us: float
    cpu_per_request_us: float  # the process tree's CPU time over the requests served


@dataclass(frozen=True, slots=True)
class Case:
    """One row: Convoy, and the bare server where the case is unary gRPC."""

    case: str
    concurrency: int
    measured: Measured | None
    bare: Measured | None
    stages: Stages | None
    bare_stages: Stages | None
    pair_ratios: tuple[float, ...] = ()  # Convoy's rate over the bare server's, per A B B A


def _mean(runs: Sequence[Run]) -> Measured | None:
    good = [r for r in runs if r.measured is not None and r.server_cpu is not None]
    if not good:
        return None
    rates = [r.measured.infer_per_s for r in good if r.measured]
    p50s = [r.measured.p50_ms * 1000 for r in good if r.measured]
    cpus = [
        r.server_cpu / r.measured.infer_per_s * 1e6 for r in good if r.measured and r.server_cpu
    ]
    return Measured(sum(rates) / len(rates), sum(p50s) / len(p50s), sum(cpus) / len(cpus))


def build_repository(root: Path) -> Path:
    repo = root / "models"
    model = MLP.build()
    for batching in ("off", "on"):
        name = f"mlp_{batching}"
        (repo / name / "1").mkdir(parents=True)
        onnx.save(model, str(repo / name / "1" / "model.onnx"))
        (repo / name / "config.pbtxt").write_text(variant_config(MLP, batching))
    return repo


def server_commands(repo: Path) -> tuple[list[str], list[str]]:
    """Convoy's command line on `repo` (free ports), and the bare server's on its `mlp_on`."""
    convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
    convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
    canned = [sys.executable, str(REPO_ROOT / "scripts" / "canned_grpc.py")]
    canned.append(str(repo / "mlp_on" / "config.pbtxt"))
    return convoy, canned


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--cases", type=lambda s: s.split(","), default=list(CASES))
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument(
        "--pairs", type=int, default=1, help="A B B A rounds against the bare server per row"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hotpath-") as scratch_dir:
        scratch = Path(scratch_dir)
        convoy, canned = server_commands(build_repository(scratch))
        window = args.window_ms

        def run(url: str, model: str, c: int, front_end: str, pid: int) -> Run:
            csv_path = scratch / "pa.csv"
            csv_path.unlink(missing_ok=True)
            return run_perf_analyzer(url, model, c, window, csv_path, front_end, CpuMeter(pid))

        def staged(url: str, model: str, c: int, front_end: str, pid: int) -> Stages | None:
            if args.no_profile:
                return None
            csv_path = scratch / "profiled.csv"
            load = perf_analyzer_command(url, model, c, window, csv_path, front_end, trials=5)
            return profile(pid, load, csv_path, 3 * window / 1000)

        table: list[Case] = []
        with (
            server_process(canned, scratch / "canned.log", GRPC_LINE) as (bare_pid, (bare,)),
            server_process(convoy, scratch / "convoy.log", CONVOY_LINE) as (pid, ports),
            server_process(
                [*convoy, "--frontend-workers", "1"], scratch / "worker.log", CONVOY_LINE
            ) as (worker_pid, worker_ports),
        ):
            bare_url = f"127.0.0.1:{bare}"
            for case in args.cases:
                for c, model in LEVELS:
                    front_end = "grpc" if case.startswith("grpc") else case
                    server_pid, (grpc_port, http_port) = (
                        (worker_pid, worker_ports) if case == "grpc-worker" else (pid, ports)
                    )
                    url = f"127.0.0.1:{http_port if front_end == 'http' else grpc_port}"
                    bare_measured = bare_stages = None
                    ratios: list[float] = []
                    if front_end == "grpc":  # A B B A against the bare server, `pairs` times
                        runs: list[Run] = []
                        bare_runs: list[Run] = []
                        for _ in range(args.pairs):
                            ours = [run(url, model, c, front_end, server_pid)]
                            theirs = [run(bare_url, "mlp_on", c, "grpc", bare_pid)]
                            theirs.append(run(bare_url, "mlp_on", c, "grpc", bare_pid))
                            ours.append(run(url, model, c, front_end, server_pid))
                            if (a := _mean(ours)) and (b := _mean(theirs)):
                                ratios.append(a.infer_per_s / b.infer_per_s)
                            runs += ours
                            bare_runs += theirs
                        measured, bare_measured = _mean(runs), _mean(bare_runs)
                        bare_stages = staged(bare_url, "mlp_on", c, "grpc", bare_pid)
                    else:
                        measured = _mean([run(url, model, c, front_end, server_pid)])
                    stages = staged(url, model, c, front_end, server_pid)
                    row = Case(case, c, measured, bare_measured, stages, bare_stages, tuple(ratios))
                    table.append(row)
                    print(_row_line(row), flush=True)
        _print_tables(table)


def _of(measured: Measured | None, name: str) -> float | None:
    return None if measured is None else float(getattr(measured, name))


def _cell(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _row_line(row: Case) -> str:
    ours, theirs = row.measured, row.bare
    line = (
        f"{row.case} c={row.concurrency}: Convoy {_cell(_of(ours, 'infer_per_s'))} infer/s, "
        f"p50 {_cell(_of(ours, 'p50_us'))} us, CPU {_cell(_of(ours, 'cpu_per_request_us'))} "
        "us/req"
    )
    if theirs is not None:
        line += (
            f"; bare {_cell(theirs.infer_per_s)} infer/s, p50 {_cell(theirs.p50_us)} us, CPU "
            f"{_cell(theirs.cpu_per_request_us)} us/req"
        )
    if len(row.pair_ratios) > 1:
        line += "; /bare by pair " + " / ".join(f"{ratio:.2f}" for ratio in row.pair_ratios)
    return line


def _print_tables(table: Sequence[Case]) -> None:
    print(
        "\n| case | c | infer/s | p50 us | CPU us/req | bare infer/s | bare p50 us | "
        "bare CPU us/req | /bare | p50 - bare | CPU / bare |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in table:
        ours, theirs = row.measured, row.bare
        ratio = p50 = cpu = None
        if ours and theirs:
            ratio = ours.infer_per_s / theirs.infer_per_s
            p50 = ours.p50_us - theirs.p50_us
            cpu = ours.cpu_per_request_us / theirs.cpu_per_request_us
        cells = [
            _cell(_of(ours, "infer_per_s")),
            _cell(_of(ours, "p50_us")),
            _cell(_of(ours, "cpu_per_request_us")),
            _cell(_of(theirs, "infer_per_s")),
            _cell(_of(theirs, "p50_us")),
            _cell(_of(theirs, "cpu_per_request_us")),
            _cell(ratio, 2),
            _cell(p50),
            _cell(cpu, 2),
        ]
        print(f"| {row.case} | {row.concurrency} | " + " | ".join(cells) + " |")
    profiled = [row for row in table if row.stages is not None]
    if not profiled:
        return
    header = " | ".join(f"{row.case} c={row.concurrency}" for row in profiled)
    print(f"\nGIL-held time per request by stage, us:\n\n| stage | {header} |")
    print("| --- |" + " --- |" * len(profiled))
    for stage in STAGE_NAMES:
        cells = [_cell(None if row.stages is None else row.stages[stage]) for row in profiled]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    totals = [_cell(None if row.stages is None else sum(row.stages.values())) for row in profiled]
    print("| GIL-held, all stages | " + " | ".join(totals) + " |")
    bare = [
        _cell(None if row.bare_stages is None else sum(row.bare_stages.values()))
        for row in profiled
    ]
    print("| bare grpc.aio, GIL-held | " + " | ".join(bare) + " |")
    cpus = [_cell(_of(row.measured, "cpu_per_request_us")) for row in profiled]
    print("| CPU per request, all threads | " + " | ".join(cpus) + " |")


if __name__ == "__main__":
    main()
