"""What a server's own work per request costs on grpc.aio's floor, and where Convoy sits on that
curve: the bound on the hot-path targets on this machine.

Usage: python scripts/handler_bench.py [--window-ms 2000] [--work-us 0,10,20,30,40,50,100,200]

The bare grpc.aio server (scripts/canned_grpc.py) runs once for each amount of busy work per
ModelInfer in --work-us (0: its floor), and once more with no work but each call awaiting its
answer from a task that answers all waiting calls (`--await-batch`: what grpc.aio charges a
handler that waits for its batch, as Convoy's do); Convoy serves scripts/hotpath_bench.py's models;
perf_analyzer measures unary gRPC (`-b 1 -s 999`) at c = 1 (p50; Convoy on `mlp_off`, mlp
without batching) and at c = 32 (infer/s; Convoy on `mlp_on`, the seed's batching), the whole
set twice. Each table gives every server's figure against the bare floor's and the busy work
at which a bare server serves as Convoy did (interpolated on the curve); at c = 1, Convoy's time
per request inside its engine (queue and compute, from its statistics; decode and encode come
on top). Then, measured in this process with warm caches: mlp's `session.run` for one row, and
Convoy's whole path per request (decode, engine, batcher, ONNX Runtime, encode; without
sockets, as scripts/instructions_bench.py runs it) at c = 1 and c = 32.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnxruntime as ort
import uvloop

from scripts.bench_drivers import REPO_ROOT, run_perf_analyzer, server_process
from scripts.bench_runs import CONVOY_LINE, GRPC_LINE
from scripts.hotpath_bench import build_repository
from scripts.instructions_bench import serve_requests

DEFAULT_WORK_US = (0, 10, 20, 30, 40, 50, 100, 200)
LEVELS = ((1, "mlp_off"), (32, "mlp_on"))  # as scripts/hotpath_bench.py's
ROUNDS = 2
CONVOY = "convoy"  # the figures' keys: (c, us of busy work), or (c, one of these)
AWAITING = "awaiting a batch"
Key = tuple[int, int | str]
HOT_REQUESTS = 4000


def equivalent_work(curve: Sequence[tuple[float, float]], p50_us: float) -> float | None:
    """The busy work (us) at which the bare server's p50 would be `p50_us`, read off `curve`
    ((work, p50) pairs) by linear interpolation between neighbours in order of work; None
    outside the curve's range. Noise may make the curve dip: each stretch is read as measured."""
    points = sorted(curve)
    for (work_a, p50_a), (work_b, p50_b) in itertools.pairwise(points):
        low, high = min(p50_a, p50_b), max(p50_a, p50_b)
        if low <= p50_us <= high:
            if p50_b == p50_a:
                return work_a
            return work_a + (work_b - work_a) * (p50_us - p50_a) / (p50_b - p50_a)
    return None


def engine_ns(http_port: int, model: str) -> tuple[int, int]:
    """The model's successful requests and their total time inside the engine (ns), from its
    statistics."""
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        stats = json.load(answer)["model_stats"][0]["inference_stats"]["success"]
    return int(stats["count"]), int(stats["ns"])


def session_run_us(model_path: Path) -> float:
    """mlp's `session.run` for one row, ONNX Runtime's default session, in a warm loop (us)."""
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: np.ones((1, 256), np.float32)}
    for _ in range(200):
        session.run(None, feed)
    start_s = time.perf_counter()
    for _ in range(HOT_REQUESTS):
        session.run(None, feed)
    return (time.perf_counter() - start_s) / HOT_REQUESTS * 1e6


def convoy_path_us(repo: Path, model: str, concurrency: int) -> float:
    """Convoy's whole path per request in process, `concurrency` callers at a time, in a warm
    loop (us)."""
    served = uvloop.run(serve_requests(repo, model, HOT_REQUESTS, concurrency))
    return served.seconds / (HOT_REQUESTS // concurrency * concurrency) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument(
        "--work-us",
        type=lambda s: tuple(int(w) for w in s.split(",")),
        default=DEFAULT_WORK_US,
    )
    args = parser.parse_args(argv)
    works = tuple(sorted({0, *args.work_us}))
    with tempfile.TemporaryDirectory(prefix="handler-") as scratch_dir:
        scratch = Path(scratch_dir)
        repo = build_repository(scratch)
        config = repo / "mlp_on" / "config.pbtxt"
        convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        figures: dict[Key, list[float]] = {}
        engine: list[tuple[int, int]] = []  # Convoy's requests and engine ns per c = 1 run
        csv_path = scratch / "pa.csv"

        def measure(url: str, model: str, key: Key) -> None:
            c = key[0]
            csv_path.unlink(missing_ok=True)
            measured = run_perf_analyzer(url, model, c, args.window_ms, csv_path, "grpc").measured
            if measured is not None:
                figure = measured.p50_ms * 1000 if c == 1 else measured.infer_per_s
                figures.setdefault(key, []).append(figure)

        with server_process(convoy, scratch / "convoy.log", CONVOY_LINE) as (_, ports):
            grpc_port, http_port = ports
            for _ in range(ROUNDS):
                for work in (*works, AWAITING):
                    bare = [sys.executable, str(REPO_ROOT / "scripts" / "canned_grpc.py")]
                    bare += [str(config)]
                    bare += ["--await-batch"] if work == AWAITING else ["--work-us", str(work)]
                    log = scratch / "bare.log"
                    with server_process(bare, log, GRPC_LINE) as (_, (port,)):
                        for c, _ in LEVELS:
                            measure(f"127.0.0.1:{port}", "mlp_on", (c, work))
                for c, model in LEVELS:
                    before = engine_ns(http_port, model)
                    measure(f"127.0.0.1:{grpc_port}", model, (c, CONVOY))
                    if c == 1:
                        after = engine_ns(http_port, model)
                        engine.append((after[0] - before[0], after[1] - before[1]))
        onnx = repo / "mlp_off" / "1" / "model.onnx"
        warm = {"mlp's session.run alone, one row": session_run_us(onnx)}
        for c, model in LEVELS:
            warm[f"Convoy's whole path, c = {c}"] = convoy_path_us(repo, model, c)
    _print(works, figures, engine, warm)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _print(
    works: Sequence[int],
    figures: dict[Key, list[float]],
    engine: Sequence[tuple[int, int]],
    warm: dict[str, float],
) -> None:
    for c, model in LEVELS:
        what = "p50 (us)" if c == 1 else "infer/s"
        floor = figures.get((c, 0))
        if not floor:
            print(f"c = {c}: the bare server's floor was not measured")
            continue
        floor_figure = _mean(floor)
        curve = [(w, _mean(figures[(c, w)])) for w in works if figures.get((c, w))]
        print(f"\nc = {c}, unary gRPC: {what}, each round, their mean, and against the bare floor")
        print(f"| server | {what} per round | mean | against bare |")
        print("| --- | --- | --- | --- |")
        rows = [(f"bare, {w} us of work", figures.get((c, w))) for w in works]
        rows.append((f"bare, {AWAITING}", figures.get((c, AWAITING))))
        rows.append((f"Convoy, {model}", figures.get((c, CONVOY))))
        for name, values in rows:
            if not values:
                continue
            rounds = " / ".join(f"{v:,.0f}" for v in values)
            mean = _mean(values)
            against = f"{mean - floor_figure:+,.0f} us" if c == 1 else f"{mean / floor_figure:.2f}"
            print(f"| {name} | {rounds} | {mean:,.0f} | {against} |")
        convoy = figures.get((c, CONVOY))
        if convoy:
            work = equivalent_work(curve, _mean(convoy))
            said = "beyond the curve" if work is None else f"{work:.0f} us"
            print(f"A bare server that serves as Convoy did works {said} per request")
        if c == 1 and (count := sum(n for n, _ in engine)):
            engine_us = sum(ns for _, ns in engine) / count / 1000
            print(f"Convoy's time per request in its engine (queue, compute): {engine_us:.0f} us")
    print("\nIn process, caches warm (us per request):")
    for label, us in warm.items():
        print(f"- {label}: {us:.0f}")


if __name__ == "__main__":
    main()
