"""What scripts/latency_bench.py's benches share: a server on fresh ports and its readings
(statistics, metrics, the request-duration histogram's p99), open- and closed-loop clients, a
gRPC channel that waits out each refusal's pushback, and a python model whose batches take a
fixed time whatever their size."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from scripts.bench_drivers import server_process

SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+), metrics on :(\d+)/metrics, HTTP on :(\d+)")
IMAGE = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)


@dataclass(frozen=True)
class Server:
    grpc: str
    http: str
    metrics: str


@contextlib.contextmanager
def serve(repository: Path, *flags: str, cpus: str | None = None) -> Iterator[Server]:
    """A server on fresh ports; `cpus`: the CPUs it may run on (taskset's list), else any."""
    command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repository)]
    command += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0", *flags]
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    log = repository.parent / f"server-{time.monotonic_ns()}.log"
    with server_process(command, log, SERVING) as (_, ports):
        grpc_port, metrics_port, http_port = ports
        yield Server(f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}", str(metrics_port))


def cpu_list(text: str) -> set[int]:
    """The CPUs of taskset's list form ("0", "0,2", "0-3")."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def p99_ms(latencies_s: list[float]) -> float:
    return float(np.percentile(latencies_s, 99) * 1000) if latencies_s else float("nan")


def _model_stats(server: Server, model: str) -> dict[str, Any]:
    url = f"http://{server.http}/v2/models/{model}/stats"
    with urllib.request.urlopen(url) as page:
        return dict(json.loads(page.read())["model_stats"][0])


def statistics(server: Server, model: str) -> dict[str, int]:
    stats = _model_stats(server, model)
    inference = stats["inference_stats"]
    return {
        "executions": int(stats.get("execution_count", 0)),
        "inferences": int(stats.get("inference_count", 0)),
        "success": int(inference["success"]["count"]),
        "fail": int(inference["fail"]["count"]),
        "fail_ns": int(inference["fail"]["ns"]),
    }


def batch_times(server: Server, model: str) -> dict[int, tuple[int, int]]:
    """The model's executions so far by batch size: size -> (count, compute infer ns)."""
    return {
        int(entry["batch_size"]): (
            int(entry["compute_infer"]["count"]),
            int(entry["compute_infer"]["ns"]),
        )
        for entry in _model_stats(server, model).get("batch_stats", [])
    }


def instance_use(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], seconds: float
) -> str:
    """How busy the model's instance was between two `batch_times` readings and what an image
    cost it: its compute share of the window, the mean batch and the compute per image."""
    batches = images = busy_ns = 0
    for size, (count, ns) in after.items():
        count_before, ns_before = before.get(size, (0, 0))
        batches += count - count_before
        images += (count - count_before) * size
        busy_ns += ns - ns_before
    if not batches:
        return "no batches"
    return (
        f"instance computing {busy_ns / 1e9 / seconds:.0%} of the time, batches of "
        f"{images / batches:.1f}, {busy_ns / images / 1e6:.1f} ms per image"
    )


def metrics_page(server: Server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics}/metrics") as page:
        return str(page.read().decode())


def metric(server: Server, name: str, model: str) -> float:
    """A model's sample on the metrics page (0 while the page has none)."""
    text = metrics_page(server)
    found = re.search(rf'^{name}{{model="{model}"[^}}]*}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def drain(server: Server, model: str) -> float:
    """Wait until the model's executions stop growing (its queue is empty); seconds waited."""
    started = time.monotonic()
    last = statistics(server, model)["inferences"]
    while time.monotonic() - started < 120:
        await asyncio.sleep(0.5)
        now = statistics(server, model)["inferences"]
        if now == last:
            break
        last = now
    return time.monotonic() - started


Call = Callable[[], Awaitable[None]]


@dataclass
class Tally:
    ok: list[float]  # latencies of the answers, seconds
    refused: int = 0
    late: int = 0  # given up by the client
    other: int = 0


async def open_loop(call: Call, rate: float, seconds: float, tally: Tally) -> None:
    """Poisson arrivals at `rate` per second for `seconds`; waits for the last to finish."""
    rng = random.Random(1)
    tasks: list[asyncio.Task[None]] = []

    async def one() -> None:
        started = time.monotonic()
        try:
            await call()
            tally.ok.append(time.monotonic() - started)
        except TimeoutError:
            tally.late += 1
        except InferenceServerException as error:
            if str(error.status()) in (
                "StatusCode.UNAVAILABLE",
                "503",
                "StatusCode.DEADLINE_EXCEEDED",
            ):
                tally.refused += 1
            else:
                tally.other += 1

    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while next_at < end:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        tasks.append(asyncio.create_task(one()))
        next_at += rng.expovariate(rate)
    await asyncio.gather(*tasks)


async def closed_loop(call: Call, in_flight: int, seconds: float) -> float:
    """Answers per second with `in_flight` requests kept outstanding (refusals do not count)."""
    done = 0
    end = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < end:
            with contextlib.suppress(InferenceServerException):
                await call()
                done += 1

    await asyncio.gather(*(loop() for _ in range(in_flight)))
    return done / seconds


def grpc_resnet(client: grpcaio.InferenceServerClient, model: str) -> Call:
    async def call() -> None:
        tensor = grpcaio.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(IMAGE)
        await client.infer(model, [tensor])

    return call


# A client channel that retries UNAVAILABLE under gRPC's retry policy, so that it waits out a
# refusal's grpc-retry-pushback-ms (up to gRPC's five attempts), with tritonclient's own limits
# and a retry buffer that holds a resnet18 request (gRPC keeps 256 KiB per call by default, and
# does not retry a call whose request is larger).
_RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.05s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
_SERVICE = {"service": "inference.GRPCInferenceService"}
RETRYING = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.enable_retries", 1),
    ("grpc.per_rpc_retry_buffer_size", 16 << 20),
    (
        "grpc.service_config",
        json.dumps({"methodConfig": [{"name": [_SERVICE], "retryPolicy": _RETRY_POLICY}]}),
    ),
]

REQUEST_HISTOGRAM = "nv_inference_request_duration_histogram_us"
BUCKETS_US = [2500 * i for i in range(1, 81)]  # 2.5 ms steps up to 200 ms


def request_buckets(server: Server, model: str) -> dict[float, float]:
    """The model's request-duration histogram: cumulative count per upper bound (us)."""
    found = re.finditer(
        rf'^{REQUEST_HISTOGRAM}_bucket{{le="([^"]+)",model="{model}",[^}}]*}} (\S+)$',
        metrics_page(server),
        re.MULTILINE,
    )
    return {float(match.group(1)): float(match.group(2)) for match in found}


def server_p99_ms(before: dict[float, float], after: dict[float, float]) -> float:
    """The p99 inside the server between two reads of its histogram: the upper bound of the
    bucket that holds it (NaN without requests; inf past the last finite bucket)."""
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = counts.get(float("inf"), 0.0)
    if not total:
        return float("nan")
    return next(bound for bound, count in counts.items() if count >= 0.99 * total) / 1000


FLAT = """
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.sleep_s = float(parameters["sleep_s"]["string_value"])

    def execute(self, requests):
        time.sleep(self.sleep_s)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(
                r, "X").as_numpy())])
            for r in requests
        ]
"""


def flat_config(name: str, sleep_s: float, max_batch_size: int, fair: bool = False) -> str:
    """A python model (in process) whose batches take `sleep_s` whatever their size."""
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n"
        'parameters { key: "convoy_in_process" value: { string_value: "true" } }\n'
        f'parameters {{ key: "sleep_s" value: {{ string_value: "{sleep_s}" }} }}\n'
        + (
            'parameters { key: "convoy_fair_share" value: { string_value: "true" } }\n'
            if fair
            else ""
        )
    )
