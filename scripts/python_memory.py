"""What a python model's instances cost in memory: a model.py whose `initialize` holds 200 MB of
weights, its own copy per instance or one copy through `pb_utils.shared_array`, in worker
processes and in the server's process (`convoy_in_process`).

Usage: python scripts/python_memory.py [--megabytes 200] [--counts 1,4]
                                      [--triton .../pytriton/tritonserver]

For each way and instance count, one server serves the model alone; once it serves, the memory
of its process tree (the server and its workers) is read from /proc: the sum of PSS (each shared
page split among the processes that map it: what the tree really holds) and the sum of RSS
(every mapped page counted in each process, as `ps` shows it). An empty server of the same
command gives the baseline. The table shows each total above that baseline, and what each
instance past the first adds, as a share of the first instance's. With `--triton DIR`, Triton
2.51 live (scripts/triton_live.py) serves the own-copy model.py the same way (its server and its
Python backend's stub processes, above an empty Triton): Triton has no call like
`shared_array`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import site
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts import models, triton_live
from scripts.bench_drivers import server_process
from scripts.bench_runs import CONVOY_LINE

# Weights made in `initialize`: its own copy, or one copy every instance of the version maps.
MODEL_PY = """
import sys

sys.path[:0] = {site_packages}  # Triton's stub: NumPy from this environment
import numpy as np
import triton_python_backend_utils as pb_utils

COUNT = {count}


def load():
    return np.random.default_rng(0).random(COUNT)


class TritonPythonModel:
    def initialize(self, args):
        self.weights = {weights}
        float(self.weights.sum())  # every page touched, as a model reading its weights does

    def execute(self, requests):
        y = np.full((1, 1), self.weights[0], np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]) for _ in requests]
"""
WEIGHTS = {"own copy": "load()", "shared_array": 'pb_utils.shared_array("weights", load)'}
MODES = {"worker processes": "", "in process": "convoy_in_process"}


def _config(count: int, in_process: bool) -> str:
    config = (
        'name: "weights"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP64 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP64 dims: [ 1, 1 ] } ]\n'
        f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
    )
    if in_process:
        config += 'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'
    return config


def tree_memory(root: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes, summed over `root` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                stat = Path(entry.path, "stat").read_text(encoding="ascii")
                parent = int(stat[stat.rindex(")") + 2 :].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    pss = rss = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("Pss", "Rss"):
                    kib = int(value.split()[0]) * 1024
                    pss, rss = (pss + kib, rss) if key == "Pss" else (pss, rss + kib)
    return pss, rss


def _measure(scratch: Path, repo: Path, triton: Path | None = None) -> tuple[int, int]:
    if triton is None:
        command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        command += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        started = CONVOY_LINE
    else:
        backends = triton_live.backend_directory(triton, scratch / f"backends-{repo.name}")
        command, started = triton_live.command(triton, repo, backends), triton_live.STARTED
    with server_process(command, scratch / "server.log", started) as (pid, _):
        return tree_memory(pid)


def model_py(count: int, weights: str) -> str:
    return MODEL_PY.format(count=count, weights=weights, site_packages=site.getsitepackages())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--counts", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4])
    parser.add_argument(
        "--triton", type=Path, help="the tritonserver directory of the nvidia-pytriton wheel"
    )
    args = parser.parse_args(argv)
    ways = [(w, e, m, p, None) for w, e in WEIGHTS.items() for m, p in MODES.items()]
    if args.triton:
        ways.append(("own copy", WEIGHTS["own copy"], "Triton 2.51", "", args.triton.resolve()))
    count = args.megabytes * 1_000_000 // 8
    mib = 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="python-memory-") as scratch_dir:
        scratch = Path(scratch_dir)
        empty = scratch / "empty"
        empty.mkdir()
        bases = {None: _measure(scratch, empty)}
        if args.triton:
            bases[args.triton.resolve()] = _measure(scratch, empty, args.triton.resolve())
        for server, (base_pss, base_rss) in bases.items():
            print(
                f"empty {'Convoy' if server is None else 'Triton'}: PSS {base_pss / mib:,.0f} "
                f"MiB, RSS {base_rss / mib:,.0f} MiB"
            )
        print()
        print("| weights | where | instances | PSS above empty | RSS above empty |")
        print("| --- | --- | --- | --- | --- |")
        summary: list[tuple[str, str, dict[int, tuple[int, int]]]] = []
        for weights, expression, mode, parameter, triton in ways:
            base_pss, base_rss = bases[triton]
            totals = {}
            for instances in args.counts:
                repo = scratch / f"repo-{len(summary)}-{instances}"
                config = _config(instances, bool(parameter))
                models.write_python_model(repo, "weights", model_py(count, expression), config)
                pss, rss = _measure(scratch, repo, triton)
                totals[instances] = (pss - base_pss, rss - base_rss)
                print(
                    f"| {weights} | {mode} | {instances} | {totals[instances][0] / mib:,.0f} "
                    f"MiB | {totals[instances][1] / mib:,.0f} MiB |",
                    flush=True,
                )
            summary.append((weights, mode, totals))
        low, high = min(args.counts), max(args.counts)
        print()
        print("| weights | where | each instance past the first adds (PSS) | of the first's |")
        print("| --- | --- | --- | --- |")
        for weights, mode, totals in summary:
            first = totals[low][0] / low
            each = (totals[high][0] - totals[low][0]) / max(high - low, 1)
            print(
                f"| {weights} | {mode} | {each / mib:,.0f} MiB | {each / first:.0%} |"
                if first > 0
                else f"| {weights} | {mode} | {each / mib:,.0f} MiB | - |"
            )


if __name__ == "__main__":
    main()
