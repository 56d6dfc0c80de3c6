"""Throughput of ONNX Runtime thread rules, in process: each instance is a Python thread driving
its own session, as Convoy's one worker thread per instance does (ONNX Runtime releases the GIL).

Usage: python scripts/ort_threads.py [--seconds S] [--repeat N]
Prints markdown tables of items/s and of the cores the process kept busy, per scenario and rule:
the best of N rounds, each round running every cell once, so that a neighbour's load on a shared
machine slows every rule alike rather than one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python scripts/ort_threads.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnx
import onnxruntime as ort

from backends import OrtSettings, usable_cores
from proto import model_config_pb2 as mc
from scripts import models

_SHAPES = {"resnet18": (3, 224, 224), "mlp": (256,)}
_LIGHT_PAUSE_S = 0.005  # a light model sleeps this long between its requests


@dataclass(frozen=True)
class Load:
    model: str  # a key of _SHAPES
    batch: int  # items per run
    instances: int  # sessions of the model, one thread each
    light: bool = False  # pause between runs instead of running flat out


@dataclass(frozen=True)
class Rule:
    name: str
    # "1", "ort" (0), "model" (cores // the model's instances), "all" (// every model's),
    # "global" (one pool for the process), "convoy" (OrtSettings.from_config)
    threads: str
    spin: bool = True  # session.intra_op.allow_spinning (for ONNX Runtime's own duration)


RULES = (
    Rule("1 / inst", "1"),
    Rule("ORT (0)", "ort"),
    Rule("cores / model inst", "model"),
    Rule("cores / model inst, no spin", "model", spin=False),
    Rule("Convoy: ORT (0) for 1 inst, else cores / model inst; 50 us spin", "convoy"),
    Rule("cores / all inst, no spin", "all", spin=False),
    Rule("global pool", "global"),
)

SCENARIOS = (
    (Load("resnet18", 1, 1),),
    (Load("resnet18", 1, 2),),
    (Load("resnet18", 8, 1),),
    (Load("resnet18", 8, 2),),
    (Load("mlp", 1, 1),),
    (Load("mlp", 1, 2),),
    (Load("mlp", 8, 1),),
    (Load("mlp", 8, 2),),
    (Load("resnet18", 8, 1), Load("mlp", 8, 2)),
    (Load("resnet18", 8, 1), Load("mlp", 8, 1)),
    (Load("resnet18", 8, 1), Load("mlp", 1, 2, light=True)),
    (Load("resnet18", 8, 1), Load("mlp", 1, 1, light=True)),
)


def _use_global_pools() -> None:
    ort.set_global_thread_pool_sizes(usable_cores(), 1)  # before the process's first session


def _options(rule: Rule, load: Load, loads: tuple[Load, ...]) -> ort.SessionOptions:
    if rule.threads == "convoy":
        config = mc.ModelConfig()
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=load.instances)
        return OrtSettings.from_config(config, cores=usable_cores()).session_options()
    options = ort.SessionOptions()
    if rule.threads == "global":
        options.use_per_session_threads = False
        return options
    sharing = {"model": load.instances, "all": sum(x.instances for x in loads)}
    if rule.threads in sharing:
        options.intra_op_num_threads = max(1, usable_cores() // sharing[rule.threads])
    else:
        options.intra_op_num_threads = 0 if rule.threads == "ort" else 1
    if not rule.spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _session_step(
    rule: Rule, load: Load, loads: tuple[Load, ...], paths: dict[str, str]
) -> Callable[[], object]:
    """One warm session's run, for one thread of `load`."""
    options = _options(rule, load, loads)
    session = ort.InferenceSession(paths[load.model], options, ["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.ones((load.batch, *_SHAPES[load.model]), "f4")}
    for _ in range(2):
        session.run(None, feed)
    return lambda: session.run(None, feed)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(
    rule: Rule, loads: tuple[Load, ...], paths: dict[str, str], seconds: float
) -> tuple[list[float], float]:
    """Items/s of each load, all running at once, and the cores the process kept busy."""
    rates = [0.0] * len(loads)
    lock = threading.Lock()
    window = [0.0, 0.0, 0.0]  # start, stop (monotonic s), CPU s at the start

    def open_window() -> None:  # once every session is warm
        window[0] = time.monotonic()
        window[1] = window[0] + seconds
        window[2] = _cpu_s()

    ready = threading.Barrier(sum(x.instances for x in loads), action=open_window)

    def drive(index: int, load: Load) -> None:
        step = _session_step(rule, load, loads, paths)
        ready.wait()
        done, now = 0, time.monotonic()
        while now < window[1]:
            step()
            done += load.batch
            now = time.monotonic()
            if load.light:
                time.sleep(_LIGHT_PAUSE_S)
        with lock:  # the last run overshoots the window: divide by the time really taken
            rates[index] += done / (now - window[0])

    threads = [
        threading.Thread(target=drive, args=(index, load))
        for index, load in enumerate(loads)
        for _ in range(load.instances)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rates, (_cpu_s() - window[2]) / (time.monotonic() - window[0])


def _describe(loads: tuple[Load, ...]) -> str:
    return " + ".join(
        f"{x.model} b{x.batch} x{x.instances}{' light' if x.light else ''}" for x in loads
    )


def _table(title: str, cells: dict[tuple[int, int], str]) -> None:
    print(f"\n{title}\n\n| scenario | " + " | ".join(rule.name for rule in RULES) + " |")
    print("|---" * (len(RULES) + 1) + "|")
    for s, loads in enumerate(SCENARIOS):
        row = (cells.get((s, r), "=") for r in range(len(RULES)))
        print(f"| {_describe(loads)} | " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="measured time per cell")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each cell shows its best")
    args = parser.parse_args()
    spawn = multiprocessing.get_context("spawn")
    # "cores / all inst" equals Convoy's rule when one model is loaded: not run there.
    cells = [
        (s, r)
        for s, loads in enumerate(SCENARIOS)
        for r, rule in enumerate(RULES)
        if rule.threads != "all" or len(loads) > 1
    ]
    best: dict[tuple[int, int], tuple[list[float], float]] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        ProcessPoolExecutor(1, mp_context=spawn) as per_session,
        ProcessPoolExecutor(1, mp_context=spawn, initializer=_use_global_pools) as shared,
    ):
        paths = {}
        for name, build in (("resnet18", models.resnet18), ("mlp", models.mlp)):
            paths[name] = str(Path(tmp) / f"{name}.onnx")
            onnx.save(build(), paths[name])
        for _ in range(args.repeat):
            for s, r in cells:
                pool = shared if RULES[r].threads == "global" else per_session
                rates, busy = pool.submit(
                    _measure, RULES[r], SCENARIOS[s], paths, args.seconds
                ).result()
                # The first load is the busy one the scenario is about.
                if (s, r) not in best or rates[0] > best[s, r][0][0]:
                    best[s, r] = (rates, busy)
    print(f"ONNX Runtime {ort.__version__}, {usable_cores()} usable cores, best of {args.repeat}")
    _table(
        "items/s (per model where two run)",
        {k: " + ".join(f"{rate:.0f}" for rate in v[0]) for k, v in best.items()},
    )
    _table("cores busy", {k: f"{v[1]:.2f}" for k, v in best.items()})


if __name__ == "__main__":
    main()
