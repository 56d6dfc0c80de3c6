"""The same resnet18 served as ONNX (ONNX Runtime), TorchScript (PyTorch) and OpenVINO IR, each
against its own framework's in-process ceiling: infer/s and p99 at each concurrency.

The ceiling is the framework alone in this process with its default settings, one thread
calling it back to back, at its best batch size of 1, 8, 16 and 32, measured before and again
after the server's runs: the higher of the two counts (a shared machine's load moves a ceiling
between runs, and the lower one would flatter the server). Since the machine's speed drifts
within the minutes a run takes, each step (a concurrency and a way of sending the inputs) also
has a ceiling of its own: the framework at its best batch size, measured the same way just
before and just after the step's servers, the mean of the two; each row gives its share of both.
Every backend gets the same config but for one number: max_batch_size is the batch size its
framework ran fastest at in the first ceiling measurement, as a Triton user tunes a model
(`--max-batch-size N` gives every backend N instead); dynamic batching with a 2 ms delay, one
CPU instance. Each backend has one server of its own; perf_analyzer drives it (batch 1 per
request, closed loop) after an unrecorded warm-up at the highest concurrency, at each
concurrency twice: with the inputs in the requests (over the wire) and through system shared
memory (`--shared-memory=system`, the way Triton offers a client on the server's machine),
since on a small machine the client and the wire take CPU from the framework.
The models come from scripts/models.py (TorchScript traced from it, IR converted from it).

With `--triton DIR` (the `pytriton/tritonserver` folder of nvidia-pytriton 0.7.0, as for
scripts/bench.py), Triton 2.51 serves each backend's model with the same config, through its
Python backend over the framework at its default settings (scripts/triton_live.py: the wheel has
no ONNX Runtime, PyTorch or OpenVINO backend), beside Convoy and against the same ceiling: what
the other server reaches of that ceiling on the same machine, with the same client. Both servers
are up together; each step is measured in the order Convoy, Triton, Triton, Convoy, and each
row is the mean of its server's two measurements.

Usage: python scripts/backend_bench.py [--window-ms 2000] [--concurrency 1 8 32]
       [--backends onnxruntime pytorch openvino]   (needs the pytorch and openvino extras)
       [--triton DIR] [--max-batch-size N] [--inputs wire shm]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnx
import onnxruntime as ort
import tritonclient.grpc as grpcclient

from scripts import framework_models, models, triton_live
from scripts.bench_drivers import run_perf_analyzer, server_process
from scripts.bench_runs import CONVOY_LINE, average_batch, batch_counts

# server, inputs (INPUTS), concurrency, infer/s, p99 ms, average batch size the server ran
Row = tuple[str, str, int, float | None, float | None, float | None]
Step = tuple[str, int]  # inputs, concurrency
Runner = Callable[[np.ndarray], object]  # the framework in this process: one batch in, run
# How the inputs reach the server -> whether perf_analyzer places them in system shared memory.
INPUTS = {"wire": False, "shm": True}

BATCH_SIZES = (1, 8, 16, 32)
CONFIG = """\
name: "{name}"
{backend}
max_batch_size: {max_batch_size}
input [ {{ name: "{input}" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "{output}" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
"""
# backend -> (config's backend line, file name, input name, output name)
BACKENDS = {
    "onnxruntime": ('backend: "onnxruntime"', "model.onnx", "input", "output"),
    "pytorch": ('platform: "pytorch_libtorch"', "model.pt", "INPUT__0", "OUTPUT__0"),
    "openvino": ('backend: "openvino"', "model.xml", "input", "output"),
}


def triton_name(backend: str) -> str:
    """The name of Triton's rows for `backend`'s model, measured against the same ceiling."""
    return f"triton (Python backend + {backend})"


def model_name(backend: str) -> str:
    """The served model's name, and its directory in the backend's repository."""
    return f"resnet18_{backend}"


def write_models(work: Path, backends: Sequence[str]) -> dict[str, Path]:
    """One repository per backend, each holding resnet18 as that backend's file (its config is
    written by `write_config`, once the ceiling has named the batch size)."""
    onnx_path = work / "resnet18.onnx"
    onnx.save_model(models.resnet18(), onnx_path)
    repos = {}
    for backend in backends:
        repo = work / backend
        version = repo / model_name(backend) / "1"
        version.mkdir(parents=True)
        target = version / BACKENDS[backend][1]
        if backend == "onnxruntime":
            target.write_bytes(onnx_path.read_bytes())
        elif backend == "pytorch":
            example = np.zeros((1, 3, 224, 224), np.float32)
            framework_models.save_torchscript(models.resnet18(), [example], target)
        else:
            framework_models.save_openvino_ir(onnx_path, target)
        repos[backend] = repo
    return repos


def write_config(repo: Path, backend: str, max_batch_size: int) -> None:
    line, _filename, input_name, output_name = BACKENDS[backend]
    name = model_name(backend)
    config = CONFIG.format(
        name=name,
        backend=line,
        max_batch_size=max_batch_size,
        input=input_name,
        output=output_name,
    )
    (repo / name / "config.pbtxt").write_text(config)


def ceiling(backend: str, run: Runner, window_s: float) -> tuple[int, float]:
    """The framework's best (batch size, infer/s) in this process, default settings, `run`
    being `framework`'s; prints the rate of every batch size (a served batch of another size
    runs at that size's rate)."""
    rates = {batch: _rate(run, batch, window_s) for batch in BATCH_SIZES}
    by_batch = ", ".join(f"batch {batch}: {rate:.1f}" for batch, rate in rates.items())
    print(f"{backend} alone, infer/s by batch size: {by_batch}", flush=True)
    best = max(rates, key=lambda batch: rates[batch])
    return best, rates[best]


def framework(backend: str, repo: Path) -> Runner:
    """`backend`'s framework in this process with its default settings, the served model
    loaded once for every ceiling measured: a call runs one batch."""
    model = str(repo / model_name(backend) / "1" / BACKENDS[backend][1])
    if backend == "onnxruntime":
        session = ort.InferenceSession(model)
        name = session.get_inputs()[0].name
        return lambda batch: session.run(None, {name: batch})
    if backend == "pytorch":
        torch = importlib.import_module("torch")
        module = torch.jit.load(model)

        def run_torch(batch: np.ndarray) -> object:
            with torch.inference_mode():
                return module(torch.from_numpy(batch))

        return run_torch
    ov = importlib.import_module("openvino")
    request = ov.Core().compile_model(model, "CPU").create_infer_request()
    return lambda batch: request.infer({0: batch})


def _rate(run: Runner, batch: int, window_s: float) -> float:
    """Infer/s of `run` called back to back by one thread with batches of `batch`."""
    x = np.random.default_rng(0).random((batch, 3, 224, 224), dtype=np.float32)
    run(x)
    run(x)  # TorchScript's profiling executor optimizes on the first runs
    runs, start_s = 0, time.perf_counter()
    while time.perf_counter() - start_s < window_s:
        run(x)
        runs += 1
    return batch * runs / (time.perf_counter() - start_s)


def measure(
    servers: Sequence[tuple[str, str | None]],
    model: str,
    args: argparse.Namespace,
    work: Path,
    ceiling_now: Callable[[], tuple[int, float]],
) -> tuple[list[Row], dict[Step, float]]:
    """perf_analyzer over gRPC against each (name, url) serving `model` (no url: a server that
    did not start, its rows empty), after an unrecorded warm-up of each at the highest
    concurrency (TorchScript's profiling executor optimizes each new batch shape on its first
    runs, which take seconds); then at each concurrency and each way of sending the inputs.
    Two servers are measured twice at each step, in the order A B B A, and each row is the mean
    of its two: a shared machine's speed drifts over minutes, and the server measured later
    would otherwise meet the later speed. For the same reason `ceiling_now` (the framework
    alone: its best batch size and rate) is measured just before and just after each step's
    servers: each step's ceiling is the mean of the two rates."""
    for _name, url in servers:
        if url is not None:
            warm_up = work / "warm-up.csv"
            run_perf_analyzer(url, model, max(args.concurrency), 1000, warm_up, "grpc")
    rows: list[Row] = []
    step_ceilings: dict[Step, float] = {}
    order = [*servers, *reversed(servers)] if len(servers) > 1 else list(servers)
    for concurrency in args.concurrency:
        for inputs in args.inputs:
            _batch, before = ceiling_now()
            found: dict[str, list[Row]] = {}
            for name, url in order:
                row = _measured(name, url, model, concurrency, inputs, args.window_ms, work)
                found.setdefault(name, []).append(row)
            step_ceilings[inputs, concurrency] = (before + ceiling_now()[1]) / 2
            rows += [mean_row(found[name]) for name, _url in servers]
    names = [name for name, _url in servers]
    ordered = sorted(rows, key=lambda row: names.index(row[0]))  # stable: each one's steps in order
    return ordered, step_ceilings


def mean_row(rows: Sequence[Row]) -> Row:
    """One server's measurements of one step as one row: each figure the mean of those that
    were measured (None where none was)."""

    def mean(values: list[float | None]) -> float | None:
        measured = [value for value in values if value is not None]
        return sum(measured) / len(measured) if measured else None

    name, inputs, concurrency = rows[0][:3]
    rate, p99, batch = (mean([row[index] for row in rows]) for index in (3, 4, 5))
    return (name, inputs, concurrency, rate, p99, batch)


def _measured(
    name: str,
    url: str | None,
    model: str,
    concurrency: int,
    inputs: str,
    window_ms: int,
    work: Path,
) -> Row:
    if url is None:
        return (name, inputs, concurrency, None, None, None)
    csv = work / f"{model}_{inputs}_{concurrency}.csv"
    with grpcclient.InferenceServerClient(url) as client:
        before = batch_counts(client, model)
        found = run_perf_analyzer(
            url, model, concurrency, window_ms, csv, "grpc", shared_memory=INPUTS[inputs]
        ).measured
        batch = average_batch(before, batch_counts(client, model))
    if found is None:
        return (name, inputs, concurrency, None, None, batch)
    print(f"  {name} {inputs} c={concurrency}: {found.infer_per_s:.1f} infer/s", flush=True)
    return (name, inputs, concurrency, found.infer_per_s, found.p99_ms, batch)


@contextlib.contextmanager
def triton_server(triton_dir: Path, backend: str, repo: Path, work: Path) -> Iterator[str | None]:
    """Triton 2.51 live serving `backend`'s model with Convoy's config (its Python backend):
    its gRPC address, or None (and why, on stderr) where it did not start."""
    root = work / f"triton_{backend}"
    name = model_name(backend)
    config = (repo / name / "config.pbtxt").read_text()
    model_file = repo / name / "1" / BACKENDS[backend][1]
    triton_live.write_model(root / "repository", name, config, model_file, backend)
    backends = triton_live.backend_directory(triton_dir, root)
    command = triton_live.command(triton_dir, root / "repository", backends)
    try:
        with server_process(command, root / "triton.log", triton_live.STARTED) as (_pid, ports):
            yield f"127.0.0.1:{ports[0]}"
            return
    except RuntimeError as error:  # it did not start: nothing is measured
        print(f"Triton: {error}", file=sys.stderr)
    yield None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window-ms", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--triton", type=Path, help="nvidia-pytriton's tritonserver folder")
    parser.add_argument(
        "--max-batch-size", type=int, help="every server's max_batch_size (default: the best)"
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        choices=list(INPUTS),
        default=list(INPUTS),
        help="in the requests (wire) and/or through system shared memory (shm)",
    )
    args = parser.parse_args(argv)
    rows: list[Row] = []
    ceilings: dict[str, tuple[int, float]] = {}
    step_ceilings: dict[tuple[str, Step], float] = {}  # (server, step) -> the step's ceiling
    served: dict[str, int] = {}  # server -> its max_batch_size
    window_s = args.window_ms / 1000
    with tempfile.TemporaryDirectory(prefix="backend_bench_") as scratch:
        work = Path(scratch)
        repos = write_models(work, args.backends)
        for backend in args.backends:
            repo = repos[backend]
            run = framework(backend, repo)
            best_batch, top = ceiling(backend, run, window_s)
            print(f"{backend}: ceiling {top:.1f} infer/s at batch {best_batch}", flush=True)
            ceilings[backend] = best_batch, top
            served[backend] = args.max_batch_size or best_batch
            print(f"{backend}: served with max_batch_size {served[backend]}", flush=True)
            write_config(repo, backend, served[backend])
            command = [sys.executable, "-m", "server", "serve", "--model-repository"]
            command += [str(repo), "--host", "127.0.0.1", "--grpc-port", "0"]
            command += ["--metrics-port", "0", "--http-port", "0"]
            log = work / f"{backend}.log"
            with contextlib.ExitStack() as servers:
                _pid, (port, _http) = servers.enter_context(
                    server_process(command, log, CONVOY_LINE)
                )
                urls: dict[str, str | None] = {backend: f"127.0.0.1:{port}"}
                if args.triton is not None:
                    triton = triton_server(args.triton.resolve(), backend, repo, work)
                    urls[triton_name(backend)] = servers.enter_context(triton)
                measured, at_steps = measure(
                    list(urls.items()),
                    model_name(backend),
                    args,
                    work,
                    functools.partial(ceiling, backend, run, window_s),
                )
                rows += measured
            after = ceiling(backend, run, window_s)
            print(f"{backend}: ceiling after {after[1]:.1f} infer/s, batch {after[0]}", flush=True)
            ceilings[backend] = max(ceilings[backend], after, key=lambda found: found[1])
            names = [backend] + ([triton_name(backend)] if args.triton is not None else [])
            for name in names:  # Triton's rows: the same config and ceilings
                ceilings[name] = ceilings[backend]
                served[name] = served[backend]
                step_ceilings.update({(name, step): rate for step, rate in at_steps.items()})
    print(
        "\n| backend | inputs | c | infer/s | p99 ms | max / avg batch | ceiling infer/s (batch) "
        "| of ceiling | step's ceiling | of it |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, inputs, concurrency, rate, p99, batch in rows:
        best_batch, top = ceilings[name]
        at_step = step_ceilings[name, (inputs, concurrency)]
        ran = f"{served[name]} / " + ("" if batch is None else f"{batch:.1f}")
        head = f"| {name} | {inputs} | {concurrency}"
        ceiling_cells = f"{top:.1f} ({best_batch})"
        if rate is None or p99 is None:
            print(f"{head} | failed | | {ran} | {ceiling_cells} | | {at_step:.1f} | |")
            continue
        ratios = f"{rate / top:.2f} | {at_step:.1f} | {rate / at_step:.2f}"
        print(f"{head} | {rate:.1f} | {p99:.1f} | {ran} | {ceiling_cells} | {ratios} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
