"""Convoy's serving benchmark against its real baselines, every figure from one run on one machine.

For each model (mlp, resnet18) it writes variants of one ONNX file: `off` (one request per
execution), `on` (Triton's dynamic batcher; resnet18's is the seed's config as the seed writes it:
one instance, no parameters, preferred batch sizes 8 and 16; Convoy's adaptive delay is on by
default) and, for mlp, `wait` (`on` with `convoy_adaptive_queue_delay: "false"`: every batch that
reaches no preferred size waits out the delay, as Triton's). Then, one measurement at a time:

- the ceiling: one in-process `onnxruntime.InferenceSession(path)` with default session options,
  at each batch size (its best is the ceiling);
- Convoy (`python -m server serve`), once per `--workers` count N (`--frontend-workers N`; N=0 is
  the in-process front end): every variant with N=0, and `on` with every N over each front end:
  unary gRPC, gRPC streaming and HTTP with binary tensors for mlp, unary gRPC for resnet18;
- the bare grpc.aio ceiling (scripts/canned_grpc.py: a canned ModelInfer answer, no decode, no
  batching, no model) with mlp's config over unary gRPC;
- the naive FastAPI control group (scripts/fastapi_baseline.py: uvicorn, raw FP32 bytes in and
  out, one default session, one `session.run` per request) in its `async def` and `def` forms;
  the faster of the two at each concurrency is the control;
- with `--triton DIR`, Triton 2.51 live (scripts/triton_live.py) with the `on` variants over the
  same front ends; without it, the Triton figures issue 13 quotes for this machine.

Every system that speaks Triton's protocol is driven by perf_analyzer with issue 13's settings
(`-b 1 --concurrency-range c:c --measurement-interval 3000 -r 3 -s 999`); the raw-bytes FastAPI app
by wrk, the client the issue measured it with (one thread, c connections, a 1 s warm-up, then as
long as perf_analyzer's three windows). `--front-ends ...,http-wrk` drives Convoy's HTTP with wrk
too (a KServe binary-tensor body), for the same client on both sides of the FastAPI ratio.
ModelStatistics before and after each run give the average batch size; the server's CPU% is the
CPU time of its whole process tree (from /proc, reaped children included) over the run's wall
time. It prints every row, the ceilings, a table of ratios (to the ceiling, to FastAPI, to N=0, to
bare grpc.aio, to Triton live and quoted), the worker-scaling table (infer/s and server CPU%
against N) and the issue's targets, met or missed. A failed measurement (perf_analyzer finds no
window, a server refuses a flag) prints as `-` and the run goes on.

Reproduce from a clean clone (Linux x86_64; perf_analyzer is downloaded on first use; wrk is the
Debian/Ubuntu package, which the bench requires and does not install):

    scripts/test.sh                              # creates .venv with the dev extra
    .venv/bin/pip install -e '.[bench]'
    apt-get install -y wrk
    .venv/bin/python scripts/bench.py --out results.json

About 12 minutes on 2 cores (14 with --triton). Options: --models mlp,resnet18
--concurrency 1,8,32  --workers 0,1,2  --window-ms 3000 (perf_analyzer's measurement interval)
--front-ends grpc,stream,http,http-wrk (instead of each model's own)  --triton DIR (the
`pytriton/tritonserver` folder of an environment with nvidia-pytriton 0.7.0). On a GPU machine
(scripts/gpu_check.sh): --gpu serves every variant with KIND_GPU instances (the ceiling and
FastAPI, CPU figures, are then skipped), --instances N sets the instance count of every variant
(Triton live's too), --nvml adds each Convoy row's mean GPU utilization, sampled through NVML
while perf_analyzer runs. --dynamic-batching BLOCK replaces every model's dynamic_batching block:
with `--instances 2`, `--dynamic-batching 'dynamic_batching { }'` serves mlp as the README's
example repository writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/bench.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnxruntime as ort

from scripts.bench_drivers import PERF_ANALYZER, measure_ceiling
from scripts.bench_report import (
    batching_ratios,
    checks,
    format_ceilings,
    format_report,
    ratio_lines,
    scaling_lines,
)
from scripts.bench_results import (
    BATCHINGS,
    FRONT_ENDS,
    SYSTEMS,
    TRITON_QUOTED,
    Ceiling,
    Lookup,
    Row,
)
from scripts.bench_runs import (
    GpuUtilization,
    Settings,
    run_canned,
    run_convoy,
    run_fastapi,
    run_triton,
)
from scripts.bench_setup import SPECS, Placing, build_repository

CEILING_WINDOW_S = 2.0  # per batch size


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
            cores=len(os.sched_getaffinity(0)),
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


def _installed_version(distribution: str) -> str:
    # scripts/gpu_check.sh runs from the source tree without installing convoy.
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "0+source"


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def _front_ends(text: str) -> list[str]:
    names = text.split(",")
    unknown = set(names) - set(FRONT_ENDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown front ends {sorted(unknown)}: {FRONT_ENDS}")
    return names


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=lambda s: s.split(","), default=list(SPECS))
    parser.add_argument("--concurrency", type=_int_list, default=[1, 8, 32])
    parser.add_argument(
        "--workers",
        type=_int_list,
        default=[0, 1, 2],
        help="Convoy's --frontend-workers counts; 0 is the in-process front end",
    )
    parser.add_argument(
        "--window-ms",
        "--measurement-interval",
        type=int,
        default=3000,
        help="perf_analyzer's measurement interval; wrk runs as long as three",
    )
    parser.add_argument(
        "--front-ends",
        type=_front_ends,
        default=[],
        help=f"those the batching variant is measured over, from {','.join(FRONT_ENDS)}",
    )
    parser.add_argument(
        "--triton",
        type=Path,
        metavar="DIR",
        help="also run Triton 2.51 live: the pytriton/tritonserver folder of nvidia-pytriton",
    )
    parser.add_argument(
        "--gpu", action="store_true", help="serve every variant with KIND_GPU instances"
    )
    parser.add_argument(
        "--instances", type=int, default=0, help="instances per variant (default: the spec's)"
    )
    parser.add_argument(
        "--dynamic-batching",
        metavar="BLOCK",
        help="every model's dynamic_batching block instead of its own, e.g. 'dynamic_batching { }'",
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


def _order(models_: Sequence[str]) -> Callable[[Row], tuple[int, ...]]:
    def key(r: Row) -> tuple[int, ...]:
        return (
            models_.index(r.model),
            r.concurrency,
            SYSTEMS.index(r.system),
            BATCHINGS.index(r.batching),
            FRONT_ENDS.index(r.front_end),
            r.workers or 0,
        )

    return key


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_average = os.getloadavg()
    start_s = time.monotonic()
    specs = [SPECS[name] for name in args.models]
    if args.dynamic_batching:
        specs = [replace(spec, dynamic_batching=f"{args.dynamic_batching}\n") for spec in specs]
    subprocess.run([str(PERF_ANALYZER), "--prepare-only"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="convoy-bench-") as tmp:
        settings = Settings(
            Path(tmp), tuple(args.concurrency), args.window_ms, tuple(args.front_ends)
        )
        placing = Placing("KIND_GPU" if args.gpu else "", args.instances)
        repo = build_repository(settings.scratch, specs, placing)
        # One thing at a time: nothing else runs while the ceiling, or any server, is measured.
        # The ceiling and FastAPI are CPU sessions: with --gpu there are none to compare with.
        ceilings = []
        if not args.gpu:
            for spec in specs:
                onnx_path = settings.scratch / f"{spec.name}.onnx"
                rates = measure_ceiling(onnx_path, spec.ceiling_batch_sizes, CEILING_WINDOW_S)
                ceilings.append(Ceiling(spec.name, rates))
                print(format_ceilings(ceilings[-1:]), file=sys.stderr, flush=True)
        gpus = GpuUtilization() if args.nvml else None
        rows: list[Row] = []
        for workers in args.workers:
            rows += run_convoy(repo, specs, workers, settings, gpus)
        for spec in specs:
            if spec.canned:
                rows += run_canned(repo, spec, settings)
        if not args.gpu:
            rows += run_fastapi(specs, settings)
        if args.triton:
            # The same instance count; the kind stays the spec's (Triton live runs on the CPU).
            rows += run_triton(args.triton.resolve(), specs, settings, Placing("", args.instances))
    rows.sort(key=_order(args.models))
    look = Lookup(rows, ceilings)
    host = Machine.read(load_average)
    ratios, scaling = ratio_lines(look), scaling_lines(look)
    targets, batching = checks(look, host.cores), batching_ratios(look)
    wall_s = time.monotonic() - start_s
    print(format_report(rows, ceilings, ratios, scaling, targets, batching))
    print(host.line())
    if gpus is not None:
        print(f"gpus: {', '.join(gpus.names)}; {placing.count or 'spec'} instance(s) per variant")
    print(f"wall time: {wall_s:.0f} s")
    if args.out:
        report = {
            "rows": [asdict(r) for r in rows],
            "ceilings": [asdict(c) for c in ceilings],
            "ratios": [asdict(x) for x in ratios],
            "scaling": [asdict(x) for x in scaling],
            "targets": [asdict(x) for x in targets],
            "batching": batching,
            "triton_quoted": [
                {"model": m, "front_end": fe, "concurrency": c, **asdict(q)}
                for (m, fe, c), q in TRITON_QUOTED.items()
            ],
            "machine": asdict(host),
            "wall_s": wall_s,
            "settings": {
                "window_ms": args.window_ms,
                "concurrency": args.concurrency,
                "workers": args.workers,
                "gpu": args.gpu,
                "instances": args.instances,
                "triton_live": args.triton is not None,
            },
            "gpus": gpus.names if gpus is not None else [],
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
