"""What the Python backend costs: the same mlp served by Convoy's ONNX Runtime backend and by a
Triton-style model.py that runs one ONNX Runtime session, in its own process (the default) and in
the server's process (`convoy_in_process`), there with fast batches on the event loop
(`convoy_inline_execute`), all in one server, measured in one run; with
`--triton DIR`, also Triton 2.51 live serving the same model.py through its Python backend.

Usage: python scripts/python_bench.py [--window-ms 3000] [--concurrency 8,32]
                                      [--front-ends grpc,stream,http] [--one-thread]
                                      [--triton .../pytriton/tritonserver]

The model.py is the one scripts/triton_live.py writes for Triton live: each model has one
instance and the seed's batching (2 ms), and its session has ONNX Runtime's defaults, as a user
writes it, or with `--one-thread` one intra-op thread (ONNX Runtime's default pool spins between
runs, unbounded, on cores the server needs; Convoy's own backend bounds the spin to 50 us). For
each front end and concurrency, perf_analyzer (`-b 1 -s 999`, three windows) measures the
systems in order and then in reverse (A B C D E E D C B A), and each row is the mean of its two
runs: infer/s, p50, and the server's CPU per request (its process tree, python workers and
Triton's stubs included, from /proc), and for Convoy the part of it that the model's worker
processes spent. The ratios are CPU per request over the ONNX backend's in the same run (the
target for the python models is 1.15) and infer/s over Triton's (target 0.8). Triton runs on a
fresh server per front end, since Triton 2.51 here crashes now and then.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx

from scripts import models, triton_live
from scripts.bench_drivers import CpuMeter, Run, run_perf_analyzer, server_process
from scripts.bench_runs import CONVOY_LINE
from scripts.bench_setup import SPECS, variant_config

MLP = SPECS["mlp"]
ONNX_MODEL = "mlp_on"  # Convoy's ONNX Runtime backend
PYTHON_MODELS = ("mlp_python", "mlp_python_in_process", "mlp_python_inline")
IN_PROCESS = 'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'
INLINE = 'parameters { key: "convoy_inline_execute" value: { string_value: "true" } }\n'
TRITON = "triton"  # its rows' name: Triton 2.51 live serving the same model.py
# system -> infer/s, p50 us, CPU us per request, of it the model's worker processes' (the server's
# children; 0 for a model in the server's process, None for Triton)
Mean = tuple[float, float, float, float | None]
Means = dict[str, Mean | None]
Row = tuple[str, int, Means]  # front end, concurrency, each system's means


def build_repository(root: Path, one_thread: bool = False) -> Path:
    """`mlp_on` (ONNX backend) and the three python models: the model.py Triton live runs
    (scripts/triton_live.py: one ONNX Runtime session, with its defaults or one thread), over
    the same ONNX file."""
    repo = root / "models"
    onnx_path = root / "mlp.onnx"
    onnx.save_model(MLP.build(), onnx_path)
    onnx_config = variant_config(MLP, "on")
    models.write_model(repo, ONNX_MODEL, onnx.load(onnx_path), onnx_config)
    for name in PYTHON_MODELS:
        config = onnx_config.replace(f'name: "{ONNX_MODEL}"', f'name: "{name}"')
        triton_live.write_model(repo, name, config, onnx_path, _framework(one_thread))
        if name != "mlp_python":
            with (repo / name / "config.pbtxt").open("a", encoding="utf-8") as f:
                f.write(IN_PROCESS + (INLINE if name.endswith("inline") else ""))
    return repo


def _framework(one_thread: bool) -> str:
    return "onnxruntime-one-thread" if one_thread else "onnxruntime"


def mean_of(runs: Sequence[tuple[Run, float | None]]) -> Mean | None:
    """infer/s, p50 us, CPU us per request and the workers' part of it, averaged over the runs
    that measured; each run comes with the CPU share of the server's own process (None: not
    measured)."""
    measured = [(r.measured, r.server_cpu, own) for r, own in runs if r.measured is not None]
    if not measured:
        return None
    count = len(measured)
    rate = sum(m.infer_per_s for m, _, _ in measured) / count
    p50_us = sum(m.p50_ms for m, _, _ in measured) / count * 1000
    cpu_us = sum(cpu / m.infer_per_s * 1e6 for m, cpu, _ in measured) / count
    if any(own is None for _, _, own in measured):
        return rate, p50_us, cpu_us, None
    worker_us = sum((cpu - own) / m.infer_per_s * 1e6 for m, cpu, own in measured) / count
    return rate, p50_us, cpu_us, max(0.0, worker_us)


def measure(
    where: dict[str, tuple[int, tuple[int, ...], str]],
    names: Sequence[str],
    front_end: str,
    c: int,
    window_ms: int,
    scratch: Path,
    input_data: Path | None = None,
) -> Means:
    """Each system at concurrency `c`, in order and then in reverse; each one's mean."""
    runs: dict[str, list[tuple[Run, float | None]]] = {name: [] for name in names}
    for name in (*names, *reversed(names)):
        server_pid, server_ports, model = where[name]
        port = server_ports[1] if front_end == "http" else server_ports[0]
        csv_path = scratch / "pa.csv"
        csv_path.unlink(missing_ok=True)
        url = f"127.0.0.1:{port}"
        meter = CpuMeter(server_pid)
        own_s, wall_s = meter.own_seconds(), time.monotonic()
        run = run_perf_analyzer(
            url, model, c, window_ms, csv_path, front_end, meter, input_data=input_data
        )
        own = (
            None if name == TRITON else (meter.own_seconds() - own_s) / (time.monotonic() - wall_s)
        )
        runs[name].append((run, own))
    return {name: mean_of(runs[name]) for name in names}


def _triton_repository(root: Path, onnx_path: Path, one_thread: bool) -> Path:
    """Triton's repository: `mlp_python`, the same model.py over the same ONNX file."""
    repo = root / "models"
    config = variant_config(MLP, "on").replace(f'name: "{ONNX_MODEL}"', 'name: "mlp_python"')
    triton_live.write_model(repo, "mlp_python", config, onnx_path, _framework(one_thread))
    return repo


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument(
        "--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[8, 32]
    )
    parser.add_argument("--front-ends", type=lambda s: s.split(","), default=["grpc"])
    parser.add_argument("--one-thread", action="store_true", help="model.py's session: 1 thread")
    parser.add_argument(
        "--triton", type=Path, help="the tritonserver directory of the nvidia-pytriton wheel"
    )
    args = parser.parse_args(argv)
    names = (ONNX_MODEL, *PYTHON_MODELS, *([TRITON] if args.triton else []))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="python-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        repo = build_repository(scratch, args.one_thread)
        convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        with server_process(convoy, scratch / "convoy.log", CONVOY_LINE) as (pid, ports):
            where = {name: (pid, ports, name) for name in names}
            for front_end in args.front_ends:
                with contextlib.ExitStack() as triton:
                    if args.triton:  # a fresh one per front end: 2.51 here crashes now and then
                        where[TRITON] = _start_triton(triton, args, scratch, front_end)
                    for c in args.concurrency:
                        means = measure(where, names, front_end, c, args.window_ms, scratch)
                        rows.append((front_end, c, means))
                        print(line(front_end, c, means), flush=True)
    _print_table(names, rows)


def _start_triton(
    stack: contextlib.ExitStack, args: argparse.Namespace, scratch: Path, front_end: str
) -> tuple[int, tuple[int, ...], str]:
    """Triton live on the same model.py, until `stack` closes: its pid, ports and model."""
    triton_dir = args.triton.resolve()  # its backend directory links into it
    root = scratch / f"triton-{front_end}"
    repo = _triton_repository(root, scratch / "mlp.onnx", args.one_thread)
    backends = triton_live.backend_directory(triton_dir, root)
    command = triton_live.command(triton_dir, repo, backends)
    log = root / "triton.log"
    pid, ports = stack.enter_context(server_process(command, log, triton_live.STARTED))
    return pid, ports, "mlp_python"


def _print_table(names: Sequence[str], rows: Sequence[Row]) -> None:
    print()
    print(
        "| front end | c | model | infer/s | p50 us | CPU us/request | of it, worker processes "
        "| CPU / ONNX backend's | infer/s / Triton's |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for front_end, c, means in rows:
        onnx_mean, triton = means[ONNX_MODEL], means.get(TRITON)
        for name in names:
            mean = means[name]
            if mean is None:
                print(f"| {front_end} | {c} | {name} | - | - | - | - | - | - |")
                continue
            rate, p50_us, cpu_us, worker_us = mean
            workers = "-" if worker_us is None else f"{worker_us:,.0f}"
            ratio = f"{cpu_us / onnx_mean[2]:.2f}" if onnx_mean else "-"
            against = f"{rate / triton[0]:.2f}" if triton else "-"
            print(
                f"| {front_end} | {c} | {name} | {rate:,.0f} | {p50_us:,.0f} | {cpu_us:,.0f} "
                f"| {workers} | {ratio} | {against} |"
            )


def line(front_end: str, c: int, means: Means) -> str:
    parts = []
    for name, mean in means.items():
        parts.append(f"{name} " + ("-" if mean is None else f"{mean[0]:,.0f}/s {mean[2]:,.0f} us"))
    return f"{front_end} c={c}: " + "; ".join(parts)


if __name__ == "__main__":
    main()
