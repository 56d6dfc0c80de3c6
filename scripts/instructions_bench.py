"""Convoy's own work per unary request, counted in instructions: deterministic where timings on a
shared machine move by 10-20% from run to run.

Usage: python scripts/instructions_bench.py [--requests 4096] [--by-library]

In one process, without sockets, each request is what grpc.aio hands the server: its bytes,
for the real `InferenceServicer.ModelInfer` (parse, decode, the core: engine, batcher, instance,
ONNX Runtime, statistics; encode). Two cases, as
scripts/hotpath_bench.py's: mlp without batching at c = 1 and mlp with the seed's batching
(preferred 8 and 16, 2 ms) at c = 32, each session on one intra-op thread so that ONNX
Runtime's spinning pool does not count. valgrind's callgrind counts the instructions of the
whole process at N and at 2N requests, with one hash seed and the objects of start-up frozen out
of the garbage collector's passes; the difference over N is the cost of one request, start-up
and warm-up cancelled out. `--by-library` splits it
into the interpreter, ONNX Runtime, protobuf, NumPy and libc. Needs valgrind (Debian's
`valgrind` package); a run takes several minutes, most of it start-up under valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import uvloop

from proto import grpc_service_pb2 as pb
from scripts.bench_drivers import REPO_ROOT
from scripts.hotpath_bench import build_repository
from server.core.engine import Engine
from server.core.local import LocalCore
from server.core.repository import Repository
from server.core.shared_memory import SharedMemory, SharedMemoryRegistry
from server.frontend.grpc.servicer import InferenceServicer

CASES = ((1, "mlp_off"), (32, "mlp_on"))
WARM_UP = 50  # requests per concurrent caller before counting: the inline rule settles
ONE_THREAD = 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'


class _Call:
    """What ModelInfer reads of grpc.aio's servicer context: no metadata, no deadline."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, metadata: object) -> None:
        raise AssertionError("no load report was asked for")


def request_bytes(model: str) -> bytes:
    """perf_analyzer's request for mlp: one FP32 [1, 256] input, raw."""
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT", datatype="FP32", shape=[1, 256])
    request.raw_input_contents.append(np.ones(256, np.float32).tobytes())
    request.outputs.add(name="OUTPUT")
    request.parameters["triton_enable_empty_final_response"].bool_param = False
    return request.SerializeToString()


@dataclass(frozen=True, slots=True)
class Served:
    """What `serve_requests` did: its last answer, serialized, and how long the requests after
    the warm-up took."""

    answer: bytes
    seconds: float


async def serve_requests(repo: Path, model: str, requests: int, concurrency: int) -> Served:
    """`requests` (rounded down to `concurrency`'s multiple) through ModelInfer, `concurrency`
    at a time, after the warm-up."""
    repository = Repository((repo,), 1)
    await repository.load_many()
    servicer = InferenceServicer(
        LocalCore(Engine(repository, strict_readiness=False), SharedMemory(SharedMemoryRegistry())),
        "bench",
    )
    data, call = request_bytes(model), _Call()
    answers: list[bytes] = []

    async def caller(count: int) -> None:
        for _ in range(count):
            answers.append(await servicer.ModelInfer(data, call))

    await asyncio.gather(*(caller(WARM_UP) for _ in range(concurrency)))
    # What start-up made stays out of the collector's full passes: one more or fewer of them
    # in one of the two runs would otherwise move the difference by millions of instructions.
    gc.freeze()
    started_s = time.perf_counter()
    await asyncio.gather(*(caller(requests // concurrency) for _ in range(concurrency)))
    seconds = time.perf_counter() - started_s
    await repository.unload_all(timeout_s=1.0)
    return Served(answers[-1], seconds)


def _count(repo: Path, model: str, requests: int, concurrency: int, out: Path) -> int:
    """The instructions callgrind counts for a whole child process serving `requests`."""
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    command += [sys.executable, __file__, "--child", str(repo), model, str(requests)]
    command.append(str(concurrency))
    # One hash seed: string hashes (and so dict probes) are then the same in every run.
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(command, cwd=REPO_ROOT, env=environment, check=True, capture_output=True)
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no totals to {out}")


def _by_library(out: Path) -> collections.Counter[str]:
    """Instructions per shared library, from callgrind_annotate's per-function list."""
    listing = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    libraries: collections.Counter[str] = collections.Counter()
    for line in listing.splitlines():
        match = re.match(r"\s*([\d,]+) \([^)]*\)\s+.*?(?:\[([^\]]*)\])?\s*$", line)
        if match is None or "PROGRAM TOTALS" in line:
            continue
        library = Path(match.group(2) or "(library not named)").name
        libraries[re.sub(r"(\.cpython-.*|\.abi3.*|\.so.*)$", "", library)] += int(
            match.group(1).replace(",", "")
        )
    return libraries


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4096, help="N, rounded down to c's")
    parser.add_argument("--by-library", action="store_true")
    parser.add_argument("--child", nargs=4, metavar=("REPO", "MODEL", "N", "C"), help="internal")
    args = parser.parse_args(argv)
    if args.child:
        repo, model, requests, concurrency = args.child
        uvloop.run(serve_requests(Path(repo), model, int(requests), int(concurrency)))
        return
    if shutil.which("valgrind") is None:
        sys.exit("instructions_bench: needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="instructions-") as scratch_dir:
        scratch = Path(scratch_dir)
        repo = build_repository(scratch)
        for _, model in CASES:
            config = repo / model / "config.pbtxt"
            config.write_text(config.read_text() + ONE_THREAD)
        for concurrency, model in CASES:
            n = args.requests // concurrency * concurrency
            once, twice = scratch / "once.out", scratch / "twice.out"
            per_request = (
                _count(repo, model, 2 * n, concurrency, twice)
                - _count(repo, model, n, concurrency, once)
            ) / n
            print(f"{model} c={concurrency}: {per_request:,.0f} instructions per request")
            if args.by_library:
                first, second = _by_library(once), _by_library(twice)
                for library in sorted(second, key=lambda name: first[name] - second[name]):
                    share = (second[library] - first[library]) / n
                    if share >= 500:
                        print(f"  {share:>9,.0f}  {library}")


if __name__ == "__main__":
    main()
