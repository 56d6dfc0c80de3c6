"""What the Python backend costs: the same mlp served by Convoy's ONNX Runtime backend and by a
Triton-style model.py that runs one ONNX Runtime session, in its own process (the default) and in
the server's process (`convoy_in_process`), all in one server, measured in one run.

Usage: python scripts/python_bench.py [--window-ms 3000] [--concurrency 8,32]
                                      [--front-ends grpc,stream,http] [--one-thread]

Each model has one instance and the seed's batching (2 ms); model.py builds its session with
ONNX Runtime's defaults, as a user writes it, or with `--one-thread` with one intra-op thread
(ONNX Runtime's default pool spins between runs, unbounded, on cores the server needs; Convoy's
own backend bounds the spin to 50 us). For each front end and concurrency, perf_analyzer
(`-b 1 -s 999`, three windows) measures the three models in the order A B C C B A, and each row
is the mean of its two runs: infer/s, p50, and the server's CPU per request (its process tree,
python workers included, from /proc). The ratios are each python model's CPU per request over
the ONNX backend's in the same run (the target is 1.15) and its rate over the ONNX backend's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx

from scripts import models
from scripts.bench_drivers import CpuMeter, Run, run_perf_analyzer, server_process
from scripts.bench_runs import CONVOY_LINE
from scripts.bench_setup import SPECS, variant_config

MLP = SPECS["mlp"]
ONNX_MODEL = "mlp_on"  # Convoy's ONNX Runtime backend
PYTHON_MODELS = ("mlp_python", "mlp_python_in_process")
# A model.py as a Triton user writes it: one ONNX Runtime session (`{options}` sets its options:
# ONNX Runtime's defaults, or one thread), a batch concatenated from the requests and split back.
MODEL_PY = """
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        path = os.path.join(args["model_repository"], args["model_version"], "mlp.onnx")
        options = ort.SessionOptions()
        {options}
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy() for r in requests]
        y = self.session.run(None, {"INPUT": np.concatenate(xs)})[0]
        responses, start = [], 0
        for x in xs:
            out = pb_utils.Tensor("OUTPUT", y[start : start + len(x)])
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += len(x)
        return responses
"""
IN_PROCESS = 'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'


SESSION_OPTIONS = {
    False: "pass  # ONNX Runtime's defaults",
    True: "options.intra_op_num_threads = 1",
}


def build_repository(root: Path, one_thread: bool = False) -> Path:
    """`mlp_on` (ONNX backend) and the two python models over the same ONNX file."""
    repo = root / "models"
    model = MLP.build()
    onnx_config = variant_config(MLP, "on")
    models.write_model(repo, ONNX_MODEL, model, onnx_config)
    python_config = onnx_config.replace(f'name: "{ONNX_MODEL}"', "").replace(
        'backend: "onnxruntime"', 'backend: "python"'
    )
    for name in PYTHON_MODELS:
        extra = IN_PROCESS if name.endswith("in_process") else ""
        config = f'name: "{name}"\n{python_config}{extra}'
        source = MODEL_PY.replace("{options}", SESSION_OPTIONS[one_thread])
        models.write_python_model(repo, name, source, config)
        onnx.save_model(model, repo / name / "1" / "mlp.onnx")
    return repo


def _mean(runs: Sequence[Run]) -> tuple[float, float, float] | None:
    """infer/s, p50 us and CPU us per request, averaged over the runs that measured."""
    measured = [(r.measured, r.server_cpu) for r in runs if r.measured is not None]
    if not measured:
        return None
    rate = sum(m.infer_per_s for m, _ in measured) / len(measured)
    p50_us = sum(m.p50_ms for m, _ in measured) / len(measured) * 1000
    cpu_us = sum(cpu / m.infer_per_s * 1e6 for m, cpu in measured) / len(measured)
    return rate, p50_us, cpu_us


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument(
        "--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[8, 32]
    )
    parser.add_argument("--front-ends", type=lambda s: s.split(","), default=["grpc"])
    parser.add_argument("--one-thread", action="store_true", help="model.py's session: 1 thread")
    args = parser.parse_args(argv)
    names = (ONNX_MODEL, *PYTHON_MODELS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="python-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        repo = build_repository(scratch, args.one_thread)
        convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        with server_process(convoy, scratch / "convoy.log", CONVOY_LINE) as (pid, ports):
            for front_end in args.front_ends:
                port = ports[1] if front_end == "http" else ports[0]
                for c in args.concurrency:
                    runs: dict[str, list[Run]] = {name: [] for name in names}
                    for name in (*names, *reversed(names)):  # A B C C B A
                        csv_path = scratch / "pa.csv"
                        csv_path.unlink(missing_ok=True)
                        run = run_perf_analyzer(
                            f"127.0.0.1:{port}", name, c, args.window_ms, csv_path, front_end,
                            CpuMeter(pid),
                        )  # fmt: skip
                        runs[name].append(run)
                    means = {name: _mean(runs[name]) for name in names}
                    rows.append((front_end, c, means))
                    print(_line(front_end, c, means), flush=True)
    print()
    print("| front end | c | model | infer/s | p50 us | CPU us/request | CPU / ONNX backend's |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for front_end, c, means in rows:
        onnx_cpu = means[ONNX_MODEL][2] if means[ONNX_MODEL] else None
        for name in names:
            mean = means[name]
            if mean is None:
                print(f"| {front_end} | {c} | {name} | - | - | - | - |")
                continue
            rate, p50_us, cpu_us = mean
            ratio = f"{cpu_us / onnx_cpu:.2f}" if onnx_cpu else "-"
            print(
                f"| {front_end} | {c} | {name} | {rate:,.0f} | {p50_us:,.0f} | {cpu_us:,.0f} "
                f"| {ratio} |"
            )


def _line(front_end: str, c: int, means: dict[str, tuple[float, float, float] | None]) -> str:
    parts = []
    for name, mean in means.items():
        parts.append(f"{name} " + ("-" if mean is None else f"{mean[0]:,.0f}/s {mean[2]:,.0f} us"))
    return f"{front_end} c={c}: " + "; ".join(parts)


if __name__ == "__main__":
    main()
