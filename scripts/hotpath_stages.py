"""The hot path's stages (scripts/hotpath_bench.py's table): which frames make each stage, and
py-spy's samples of a busy server put into them, in microseconds of GIL held per request."""

from __future__ import annotations

import collections
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from scripts.bench_drivers import REPO_ROOT, sampled_under_load

# Stages, in the request's order: a sample belongs to the stage of its innermost frame that
# one of these markers starts (a frame is "function (file:line)").
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compute", ("Session.run ", "OrtInstance._run_plain", "OrtInstance._run_bound")),
    (
        "queue, batch and hand-off",
        (
            "Batcher.",
            "next_batch ",
            "RequestQueue.",
            "Alarm.",
            "InstanceThread.",
            "concat_inputs",
            "split_outputs",
            "request_rows ",
            "OrtInstance.",
        ),
    ),
    ("statistics and tracing", ("ModelStats.", "Duration.", "Histogram.", "RequestTracer.")),
    (
        "receive and decode",
        (
            "InferenceServicer._decoded",
            "parse_request ",
            "decode_request ",
            "decode_inputs",
            "decode_outputs",
            "infer_options",
            "decode_raw ",
            "decode_json_data",
            "split_body",
            "parse_json",
            "requested_outputs",
            # A stream's reader: grpc.aio's read of its next message (Cython, without a frame
            # of its own) and the task each request is given.
            "InferenceServicer.ModelStreamInfer.<locals>.read",
            # The HTTP front end's reads and its parser's callbacks.
            "Connection.data_received",
            "Connection.on_",
            "Connection._count_head",
        ),
    ),
    (
        "validation and routing",
        ("check_request ", "Engine._target", "Repository.get", "_check_shape"),
    ),
    ("engine and submit", ("Engine.", "submit ", "LocalCore.", "InFlight.")),
    (
        "encode and answer",
        (
            "encode_response",
            "encode_stream_response_bytes",
            "encode_raw",
            "_serialized ",
            "_response ",
            "LocalCore._answer",
            "stream_message",
            # The HTTP answer's head and its write to the socket (the send itself, which
            # uvloop makes holding the GIL; grpc.aio's sends are its own threads').
            "Connection._head",
            "Connection._write",
            "Connection._stream",
        ),
    ),
    # The event loop's polling after the last answer (server.contract.idle_poll): the time
    # between requests at c = 1, not a request's own.
    ("idle poll", ("IdlePoll.",)),
    (
        "worker link",
        (
            "CoreClient.",
            "WorkerLink.",
            "Channel.",
            "encode_infer",
            "decode_infer",
            "place ",
            "_place",
            "place_bytes ",
            "placed_bytes ",
            "serve_serialized ",
            "encode_serialized ",
            "decode_serialized ",
        ),
    ),
    ("Convoy, the rest of the path", ()),
)
REST = STAGES[-1][0]
PACKAGES = ("server", "batching", "backends", "proto")
# The frames below the event loop of the core (server/cli.py) and of a worker (workers/process.py).
ENTRY = (
    "<module> (server/",
    "main (server/",
    "_command (server/__main__.py",
    "convoy (server/__main__.py",
    "_run (server/cli.py",
    "_run_module_as_main",
    "_run_code",
)
FRAMEWORK = "framework (grpc.aio, uvloop, HTTP parser, interpreter)"
STAGE_NAMES = (*(stage for stage, _ in STAGES), FRAMEWORK)
SAMPLES_PER_S = 500


Stages = dict[str, float]  # stage -> GIL-held us per request


def classify(stack: Sequence[str]) -> str:
    """The stage of one sample, from its frames (outermost first): the stage of its innermost
    frame that a stage's marker names; else Convoy's, when a frame of its packages below the
    entry point is on the stack; else the framework's."""
    for frame in reversed(stack):
        for stage, markers in STAGES:
            if frame.startswith(markers):
                return stage
    for frame in reversed(stack):
        if any(f"({package}/" in frame for package in PACKAGES) and not frame.startswith(ENTRY):
            return REST
    return FRAMEWORK


def profile(
    pid: int, load: Sequence[str], csv_path: Path, seconds: float
) -> dict[str, float] | None:
    """Each stage's GIL-held time per request, in us, while `load` (a perf_analyzer command
    line writing `csv_path`) keeps the server of `pid` (and its children) busy: py-spy samples
    the thread holding the GIL (`--gil`), so idle threads never count, and on this server what
    holds the GIL is what sets the pace. None when py-spy or the load failed."""
    samples = csv_path.with_name("samples.txt")
    # The py-spy of this environment (the bench extra), else one on PATH.
    beside = Path(sys.executable).with_name("py-spy")
    command = [str(beside) if beside.exists() else "py-spy", "record", "--pid", str(pid)]
    command += ["--subprocesses", "--gil", "--nonblocking", "--rate", str(SAMPLES_PER_S)]
    command += ["--duration", str(math.ceil(seconds)), "--format", "raw", "--output", str(samples)]
    # From a quarter in: past perf_analyzer's warm-up.
    done, infer_per_s = sampled_under_load(load, csv_path, seconds / 4, command)
    if done.returncode != 0 or not samples.exists() or infer_per_s is None:
        print(f"hotpath_bench: py-spy failed: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    counts: collections.Counter[str] = collections.Counter()
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame.replace(str(REPO_ROOT) + "/", "") for frame in stack.split(";")]
        counts[classify(frames)] += int(count)
    requests = infer_per_s * math.ceil(seconds)
    return {stage: counts[stage] / SAMPLES_PER_S / requests * 1e6 for stage in STAGE_NAMES}
