"""The response cache's worth on a repeated-input workload: resnet18 (the example model) served
twice from one generated repository, with `--cache-config local,size=...` and without, each
driven by the same closed loop of unary gRPC requests that draw from a few distinct images.

Each run warms up, then measures for a fixed time: infer/s, p50 and p99 latency, and the hits
ModelStatistics counts. Prints one row per run and the ratio cache on / cache off.

    .venv/bin/python scripts/cache_bench.py --seconds 10 --concurrency 4 --images 8
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

if __package__ in (None, ""):
    # Run as `python scripts/cache_bench.py`, Python puts scripts/ on sys.path, not the repo root.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.bench_drivers import server_process
from scripts.gen_models import write_resnet18

MODEL = "resnet18"
SERVING = re.compile(r"serving gRPC on [\w.:\[\]-]+:(\d+)")


@dataclass(frozen=True, slots=True)
class Result:
    cache: str
    infer_per_s: float
    p50_ms: float
    p99_ms: float
    hits: int
    requests: int


def _drive(url: str, images: list[np.ndarray], concurrency: int, seconds: float) -> list[float]:
    """Latencies (s) of the requests that finished in the measured window."""
    latencies: list[float] = []
    lock = threading.Lock()
    start_s = time.monotonic()
    stop_s = start_s + seconds

    def loop(index: int) -> None:
        rng = np.random.default_rng(index)
        with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
            while time.monotonic() < stop_s:
                image = images[int(rng.integers(len(images)))]
                tensor = grpcclient.InferInput("input", list(image.shape), "FP32")
                tensor.set_data_from_numpy(image)
                sent_s = time.monotonic()
                client.infer(MODEL, [tensor])
                with lock:
                    latencies.append(time.monotonic() - sent_s)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _hits(url: str) -> tuple[int, int]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        stats = client.get_inference_statistics(MODEL).model_stats[0].inference_stats
    return stats.cache_hit.count, stats.success.count


def run(repo: Path, log: Path, cache_flags: list[str], args: argparse.Namespace) -> Result:
    command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
    command += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0", *cache_flags]
    rng = np.random.default_rng(0)
    images = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(args.images)]
    with server_process(command, log, SERVING) as (_, (port,)):
        url = f"127.0.0.1:{port}"
        _drive(url, images, args.concurrency, args.warmup)
        hits_before, requests_before = _hits(url)
        latencies = _drive(url, images, args.concurrency, args.seconds)
        hits, requests = _hits(url)
    latencies.sort()
    return Result(
        cache="on" if cache_flags else "off",
        infer_per_s=len(latencies) / args.seconds,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=latencies[int(0.99 * (len(latencies) - 1))] * 1000,
        hits=hits - hits_before,
        requests=requests - requests_before,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured time first")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--images", type=int, default=8, help="distinct images drawn from")
    parser.add_argument("--cache-bytes", type=int, default=64 * 1024 * 1024)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="convoy-cache-bench-") as scratch:
        repo = Path(scratch) / "models"
        config = write_resnet18(repo) / "config.pbtxt"
        config.write_text(config.read_text() + "response_cache { enable: true }\n")
        results = [
            run(repo, Path(scratch) / "off.log", [], args),
            run(
                repo,
                Path(scratch) / "on.log",
                ["--cache-config", f"local,size={args.cache_bytes}"],
                args,
            ),
        ]
    print(f"resnet18, {args.images} distinct images, concurrency {args.concurrency}, ", end="")
    print(f"{args.seconds:.0f} s measured per run")
    print("cache  infer/s   p50 ms   p99 ms   hits/requests")
    for r in results:
        row = f"{r.cache:<5}  {r.infer_per_s:7.1f}  {r.p50_ms:7.2f}  {r.p99_ms:7.2f}"
        print(f"{row}   {r.hits}/{r.requests}")
    off, on = results
    speedup, lower = on.infer_per_s / off.infer_per_s, off.p50_ms / on.p50_ms
    print(f"cache on / off: {speedup:.1f}x the infer/s, a {lower:.1f}x lower p50")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
