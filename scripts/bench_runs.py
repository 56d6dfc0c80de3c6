"""The measurements of scripts/bench.py, one server at a time: Convoy with N front-end workers,
the bare grpc.aio server, the naive FastAPI app and Triton live, each row printed as it comes.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from scripts import triton_live
from scripts.bench_drivers import (
    REPO_ROOT,
    CpuMeter,
    Run,
    WrkTarget,
    run_perf_analyzer,
    run_wrk,
    server_process,
    warn,
)
from scripts.bench_report import row_cells
from scripts.bench_results import CANNED, CONVOY, FASTAPI, FASTAPI_FORMS, TRITON, Row
from scripts.bench_setup import (
    RAW,
    ModelSpec,
    Placing,
    Plan,
    kserve_headers,
    plans,
    variant_config,
)

CONVOY_LINE = re.compile(r"serving gRPC on [\d.]+:(\d+).*HTTP on :(\d+)")
GRPC_LINE = re.compile(r"serving gRPC on [\d.]+:(\d+)")
HTTP_LINE = re.compile(r"serving HTTP on [\d.]+:(\d+)")
NVML_PERIOD_S = 0.1


@dataclass(frozen=True, slots=True)
class Settings:
    """What every measurement of the run shares."""

    scratch: Path  # the run's temporary directory: repositories, bodies, logs, CSVs
    concurrencies: tuple[int, ...]
    window_ms: int  # perf_analyzer's measurement interval; wrk runs three of them
    front_ends: tuple[str, ...]  # overrides every spec's front_ends when not empty


class GpuUtilization:
    """Every GPU's utilization through NVML (nvidia-ml-py), sampled on a thread while a
    measurement runs."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self.names = [str(pynvml.nvmlDeviceGetName(h)) for h in self._handles]

    @contextmanager
    def sampling(self) -> Iterator[list[float]]:
        """Yields the list the samples (mean over the GPUs, 0.0 - 1.0) accumulate in."""
        samples: list[float] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(NVML_PERIOD_S):
                rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
                samples.append(sum(rates) / len(rates) / 100 if rates else 0.0)

        thread = threading.Thread(target=sample, name="nvml", daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            stop.set()
            thread.join()


def batch_counts(client: grpcclient.InferenceServerClient, model: str) -> tuple[int, int] | None:
    """(inference_count, execution_count) of the model's version 1; None if it cannot say."""
    try:
        stats = client.get_inference_statistics(model_name=model).model_stats[0]
    except (InferenceServerException, IndexError):
        return None
    return int(stats.inference_count), int(stats.execution_count)


def average_batch(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] == before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def measure_served(
    system: str,
    pid: int,
    ports: tuple[int, int],
    work: Sequence[Plan],
    settings: Settings,
    *,
    workers: int | None = None,
    gpus: GpuUtilization | None = None,
) -> list[Row]:
    """Each plan at each concurrency against a server that speaks Triton's protocol on `ports`
    (gRPC, HTTP); `http-wrk` posts the KServe binary body with wrk."""
    grpc_url, http_url = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    client = grpcclient.InferenceServerClient(grpc_url)
    meter, rows = CpuMeter(pid), []
    for plan in work:
        name, fe = plan.spec.name, plan.front_end
        wrk = WrkTarget(
            f"http://{http_url}/v2/models/{plan.model}/infer",
            settings.scratch / f"{name}.kserve",
            kserve_headers(settings.scratch, name),
        )
        for c in settings.concurrencies:
            before = batch_counts(client, plan.model)
            with gpus.sampling() if gpus else nullcontext([]) as utilization:
                if fe == "http-wrk":
                    run = run_wrk(wrk, c, settings.window_ms, meter)
                else:
                    url = http_url if fe == "http" else grpc_url
                    csv_path = settings.scratch / f"{system}_{workers}_{plan.model}_{c}.csv"
                    run = run_perf_analyzer(
                        url, plan.model, c, settings.window_ms, csv_path, fe, meter
                    )
            avg_batch = average_batch(before, batch_counts(client, plan.model))
            busy = sum(utilization) / len(utilization) if utilization else None
            row = Row(
                system=system,
                model=name,
                batching=plan.batching,
                front_end=fe,
                workers=workers,
                concurrency=c,
                measured=run.measured,
                avg_batch=avg_batch,
                server_cpu=run.server_cpu,
                gpu_utilization=busy,
            )
            rows.append(_progress(row))
    client.close()
    return rows


def _failed(
    system: str, work: Sequence[Plan], settings: Settings, workers: int | None
) -> list[Row]:
    """The rows of a server that did not start: every measurement `-`."""
    return [
        _progress(
            Row(
                system=system,
                model=p.spec.name,
                batching=p.batching,
                front_end=p.front_end,
                workers=workers,
                concurrency=c,
            )
        )
        for p in work
        for c in settings.concurrencies
    ]


def run_convoy(
    repo: Path,
    specs: Sequence[ModelSpec],
    workers: int,
    settings: Settings,
    gpus: GpuUtilization | None,
) -> list[Row]:
    command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repo)]
    command += ["--grpc-port", "0", "--metrics-port", "0", "--http-port", "0"]
    if workers:
        command += ["--frontend-workers", str(workers)]
    work = plans(specs, workers, settings.front_ends)
    log = settings.scratch / f"convoy_{workers}.log"
    try:
        with server_process(command, log, CONVOY_LINE) as (pid, (port, http_port)):
            return measure_served(
                CONVOY, pid, (port, http_port), work, settings, workers=workers, gpus=gpus
            )
    except RuntimeError as error:
        warn(f"convoy with {workers} front-end workers: {error}")
        return _failed(CONVOY, work, settings, workers)


def run_canned(repo: Path, spec: ModelSpec, settings: Settings) -> list[Row]:
    """The bare grpc.aio server answering for the `on` variant's config, over unary gRPC."""
    script = REPO_ROOT / "scripts" / "canned_grpc.py"
    config = repo / f"{spec.name}_on" / "config.pbtxt"
    command = [sys.executable, str(script), str(config)]
    log = settings.scratch / f"canned_{spec.name}.log"

    def row(c: int, run: Run) -> Row:
        row = Row(
            system=CANNED,
            model=spec.name,
            batching="none",
            front_end="grpc",
            workers=None,
            concurrency=c,
            measured=run.measured,
            server_cpu=run.server_cpu,
        )
        return _progress(row)

    rows = []
    try:
        with server_process(command, log, GRPC_LINE) as (pid, (port,)):
            url, meter = f"127.0.0.1:{port}", CpuMeter(pid)
            for c in settings.concurrencies:
                csv_path = settings.scratch / f"canned_{spec.name}_{c}.csv"
                model = f"{spec.name}_on"
                run = run_perf_analyzer(url, model, c, settings.window_ms, csv_path, "grpc", meter)
                rows.append(row(c, run))
    except RuntimeError as error:  # it did not start: nothing was measured
        warn(f"bare grpc.aio server: {error}")
        rows = [row(c, Run(None, None)) for c in settings.concurrencies]
    return rows


def run_fastapi(specs: Sequence[ModelSpec], settings: Settings) -> list[Row]:
    """Both naive handler forms of every model under wrk, raw FP32 bytes in and out."""
    script = REPO_ROOT / "scripts" / "fastapi_baseline.py"
    scratch = settings.scratch
    command = [sys.executable, str(script)]
    command += [f"--model={s.name}={scratch / f'{s.name}.onnx'}" for s in specs]
    work = [(s, form, c) for s in specs for form in FASTAPI_FORMS for c in settings.concurrencies]

    def row(spec: ModelSpec, form: str, c: int, run: Run) -> Row:
        row = Row(
            system=FASTAPI,
            model=spec.name,
            batching=form,
            front_end="http-wrk",
            workers=None,
            concurrency=c,
            measured=run.measured,
            server_cpu=run.server_cpu,
        )
        return _progress(row)

    rows = []
    try:
        with server_process(command, scratch / "fastapi.log", HTTP_LINE) as (pid, (port,)):
            meter = CpuMeter(pid)
            for spec, form, c in work:
                url = f"http://127.0.0.1:{port}/{form}/{spec.name}"
                target = WrkTarget(url, scratch / f"{spec.name}.raw", (RAW,))
                rows.append(row(spec, form, c, run_wrk(target, c, settings.window_ms, meter)))
    except RuntimeError as error:  # it did not start: nothing was measured
        warn(f"FastAPI baseline: {error}")
        rows = [row(spec, form, c, Run(None, None)) for spec, form, c in work]
    return rows


def run_triton(
    triton_dir: Path, specs: Sequence[ModelSpec], settings: Settings, placing: Placing
) -> list[Row]:
    """Triton 2.51 live: each model's `on` variant, Python backend, over perf_analyzer's front
    ends, each front end on a server of its own, and a front end that measured nothing once more
    on a fresh one: Triton 2.51 here now and then crashes (SIGSEGV in
    TRITONSERVER_InferenceRequestDelete) or hangs on a streaming run, so that costs one try, not
    the other front ends' figures. `placing`: as Convoy's variants are placed."""
    root = settings.scratch / "triton"
    repo = root / "repository"
    for spec in specs:
        onnx_path = settings.scratch / f"{spec.name}.onnx"
        config = variant_config(spec, "on", placing)
        triton_live.write_model(repo, f"{spec.name}_on", config, onnx_path)
    backends = triton_live.backend_directory(triton_dir, root)
    plans = [
        Plan(spec, "on", fe)
        for spec in specs
        for fe in settings.front_ends or spec.front_ends
        if fe != "http-wrk"
    ]
    rows: list[Row] = []
    for front_end in dict.fromkeys(plan.front_end for plan in plans):
        work = [plan for plan in plans if plan.front_end == front_end]
        for attempt in (1, 2):
            command = triton_live.command(triton_dir, repo, backends)  # fresh ports each time
            log = root / f"triton-{front_end}-{attempt}.log"
            try:
                with server_process(command, log, triton_live.STARTED) as (pid, ports):
                    measured = measure_served(TRITON, pid, (ports[0], ports[1]), work, settings)
            except RuntimeError as error:
                warn(f"Triton ({front_end}): {error}")
                measured = _failed(TRITON, work, settings, None)
            if any(row.measured is not None for row in measured):
                break
            if attempt == 1:
                warn(f"Triton ({front_end}): nothing measured; once more on a fresh server")
        rows += measured
    return rows


def _progress(row: Row) -> Row:
    print("  " + " ".join(row_cells(row)), file=sys.stderr, flush=True)
    return row
