"""The example `preprocess` model.py (Pillow: decode a JPEG, resize, crop, normalise) with two
instances, served by Convoy in worker processes and in the server's process, and with `--triton
DIR` by Triton 2.51 live through its Python backend, measured in one run with the same client.

Usage: python scripts/python_preprocess_bench.py [--window-ms 3000] [--concurrency 8]
                                                 [--front-ends grpc,stream,http]
                                                 [--triton .../pytriton/tritonserver]

Every request carries the same 640x480 JPEG (a smooth synthetic picture, about the size of a
photo's; made here, nothing is downloaded) as perf_analyzer's input data. For each front end and
concurrency perf_analyzer (`-b 1 -s 999`, three windows) measures the systems A B C C B A, and a
row is the mean of a system's two runs: infer/s, p50 and the server's CPU per request (its
process tree: Convoy's workers, Triton's stubs). The last column is infer/s over Triton's (the
target is 1.0 at c = 8).

Triton 2.51's Python backend cannot read a BYTES input with NumPy 2 (its stub dies unpacking the
tensor), so its model.py runs over NumPy < 2 and Pillow from `tools/triton-stub-site`, which the
script installs there from PyPI the first time (the NumPy versions differ; the model's work is
Pillow's either way).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from PIL import Image

from scripts import gen_models, triton_live
from scripts.bench_drivers import server_process
from scripts.bench_runs import CONVOY_LINE
from scripts.python_bench import IN_PROCESS, TRITON, Means, line, measure

WORKERS = "preprocess"
IN_PROCESS_MODEL = "preprocess_in_process"
STUB_SITE = Path(__file__).resolve().parents[1] / "tools" / "triton-stub-site"
INSTANCES = "instance_group [ { count: 1 kind: KIND_CPU } ]"
TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]"


def jpeg(width: int = 640, height: int = 480) -> bytes:
    """A smooth picture with a little noise, JPEG quality 90: compresses as a photo does."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    noise = np.random.default_rng(0).normal(0, 6, (height, width, 3))
    channels = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], -1)
    pixels = np.clip(channels + noise, 0, 255).astype(np.uint8)
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, "JPEG", quality=90)
    return encoded.getvalue()


def input_data(path: Path, image: bytes) -> Path:
    """perf_analyzer's JSON input data: one request's IMAGE, a BYTES element as Triton
    serializes it (its 4-byte length, then its bytes), base64-encoded."""
    element = struct.pack("<I", len(image)) + image
    data = {"data": [{"IMAGE": {"b64": base64.b64encode(element).decode()}}]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def stub_site() -> Path:
    """A directory with NumPy < 2 and Pillow for Triton's stub, installed once."""
    if not (STUB_SITE / "PIL").is_dir():
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(STUB_SITE)]
        subprocess.run([*command, "numpy<2", "pillow"], check=True)
    return STUB_SITE


def build_repository(root: Path, triton_site: Path | None = None) -> Path:
    """Convoy's two models (worker processes, in process) or, given the stub's site directory,
    Triton's one; two instances each."""
    repo = root / "models"
    gen_models.write_preprocess(repo)
    config_path = repo / WORKERS / "config.pbtxt"
    config = config_path.read_text(encoding="utf-8").replace(INSTANCES, TWO_INSTANCES)
    config_path.write_text(config, encoding="utf-8")
    source = (repo / WORKERS / "1" / "model.py").read_text(encoding="utf-8")
    if triton_site is not None:
        future = "from __future__ import annotations\n"
        paths = f"{future}import sys\n\nsys.path[:0] = [{str(triton_site)!r}]\n"
        (repo / WORKERS / "1" / "model.py").write_text(source.replace(future, paths, 1))
        return repo
    twin = repo / IN_PROCESS_MODEL
    (twin / "1").mkdir(parents=True)
    (twin / "1" / "model.py").write_text(source, encoding="utf-8")
    in_process = config.replace(f'name: "{WORKERS}"', f'name: "{IN_PROCESS_MODEL}"') + IN_PROCESS
    (twin / "config.pbtxt").write_text(in_process, encoding="utf-8")
    return repo


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[8])
    parser.add_argument("--front-ends", type=lambda s: s.split(","), default=["grpc"])
    parser.add_argument(
        "--triton", type=Path, help="the tritonserver directory of the nvidia-pytriton wheel"
    )
    args = parser.parse_args(argv)
    names = (WORKERS, IN_PROCESS_MODEL, *([TRITON] if args.triton else []))
    rows: list[tuple[str, int, Means]] = []
    with tempfile.TemporaryDirectory(prefix="preprocess-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        data = input_data(scratch / "input.json", jpeg())
        repo = build_repository(scratch / "convoy")
        convoy = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
        convoy += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        with contextlib.ExitStack() as stack:
            pid, ports = stack.enter_context(
                server_process(convoy, scratch / "convoy.log", CONVOY_LINE)
            )
            where = {name: (pid, ports, name) for name in names}
            if args.triton:
                triton_dir = args.triton.resolve()
                root = scratch / "triton"
                triton_repo = build_repository(root, stub_site())
                backends = triton_live.backend_directory(triton_dir, root)
                command = triton_live.command(triton_dir, triton_repo, backends)
                log = root / "triton.log"
                started = server_process(command, log, triton_live.STARTED)
                triton_pid, triton_ports = stack.enter_context(started)
                where[TRITON] = (triton_pid, triton_ports, WORKERS)
            for front_end in args.front_ends:
                for c in args.concurrency:
                    means = measure(where, names, front_end, c, args.window_ms, scratch, data)
                    rows.append((front_end, c, means))
                    print(line(front_end, c, means), flush=True)
    print()
    print("| front end | c | served by | infer/s | p50 ms | CPU ms/request | infer/s / Triton's |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for front_end, c, means in rows:
        triton = means.get(TRITON)
        for name in names:
            mean = means[name]
            if mean is None:
                print(f"| {front_end} | {c} | {name} | - | - | - | - |")
                continue
            rate, p50_us, cpu_us, _ = mean
            against = f"{rate / triton[0]:.2f}" if triton else "-"
            print(
                f"| {front_end} | {c} | {name} | {rate:,.1f} | {p50_us / 1000:,.1f} "
                f"| {cpu_us / 1000:,.2f} | {against} |"
            )


if __name__ == "__main__":
    main()
