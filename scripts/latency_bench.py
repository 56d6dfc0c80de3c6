"""Serving to a latency target (issue 35): the figures of its four targets, each from one short
run against a fresh server on this machine.

  target      resnet18 with convoy_latency_target_ms 50 against the example's fixed delay: p99 of
              the accepted requests under open-loop (Poisson) loads of 0.4, 0.6 and 0.8 of the
              fixed config's measured capacity, as the client saw it and inside the server (the
              target's definition: Triton's request-duration histogram, 2.5 ms buckets), the
              share refused, the throughput of both at saturation (16 clients that resend at
              once, 16 whose gRPC retry policy waits out each refusal's pushback, and
              open-loop arrivals at 2x capacity), and the server time of a refusal
              (statistics' fail duration per failure)
  deadlines   a model whose batches of up to 2 take 40 ms, at 2x its capacity, HTTP clients
              that give up after 100 ms: goodput
              (answers within 100 ms) when they send `timeout` = 100000 us against the same
              clients without it (the server then cannot know); the server's executions against
              the answers, and its expired count against the refusals the clients saw
  fair        a model whose batches of up to 4 take 100 ms whatever their size (as on a GPU): p99
              of three light clients alone, then beside a client sending 10x each one's load
              (past capacity; it sends for a second before their window opens), with
              convoy_fair_share and without
  keep-alive  an mlp with a 1 s keep-alive: the first request after its idle unload against its
              cold start (load) time, and 32 requests racing the reload

Usage: python scripts/latency_bench.py [target|deadlines|fair|keep-alive ...] [--seconds 6]
       [--target-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from tritonclient.utils import InferenceServerException

from scripts import models
from scripts.bench_drivers import server_process
from scripts.gen_models import write_mlp, write_resnet18

SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+), metrics on :(\d+)/metrics, HTTP on :(\d+)")
IMAGE = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)


@dataclass(frozen=True)
class Server:
    grpc: str
    http: str
    metrics: str


@contextlib.contextmanager
def serve(repository: Path, *flags: str) -> Iterator[Server]:
    command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repository)]
    command += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0", *flags]
    log = repository.parent / f"server-{time.monotonic_ns()}.log"
    with server_process(command, log, SERVING) as (_, ports):
        grpc_port, metrics_port, http_port = ports
        yield Server(f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}", str(metrics_port))


def p99_ms(latencies_s: list[float]) -> float:
    return float(np.percentile(latencies_s, 99) * 1000) if latencies_s else float("nan")


def statistics(server: Server, model: str) -> dict[str, int]:
    url = f"http://{server.http}/v2/models/{model}/stats"
    with urllib.request.urlopen(url) as page:
        stats = json.loads(page.read())["model_stats"][0]
    inference = stats["inference_stats"]
    return {
        "executions": int(stats.get("execution_count", 0)),
        "inferences": int(stats.get("inference_count", 0)),
        "success": int(inference["success"]["count"]),
        "fail": int(inference["fail"]["count"]),
        "fail_ns": int(inference["fail"]["ns"]),
    }


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


# -- target ------------------------------------------------------------------------------------


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


def bench_target(scratch: Path, seconds: float, target_ms: float = 50.0) -> None:
    repository = scratch / "target"
    fixed = write_resnet18(repository)
    metrics = (
        "model_metrics { metric_control [ { metric_identifier { family: "
        f'"{REQUEST_HISTOGRAM}" }} histogram_options {{ buckets: {BUCKETS_US} }} }} ] }}\n'
    )
    config = (fixed / "config.pbtxt").read_text() + metrics
    (fixed / "config.pbtxt").write_text(config)
    targeted = repository / "resnet18_target"
    targeted.mkdir()
    (targeted / "1").symlink_to(fixed / "1", target_is_directory=True)
    parameter = (
        'parameters { key: "convoy_latency_target_ms" '
        f'value: {{ string_value: "{target_ms:g}" }} }}\n'
    )
    (targeted / "config.pbtxt").write_text(
        config.replace('name: "resnet18"', 'name: "resnet18_target"') + parameter
    )
    with serve(repository, "--metrics-config", "histogram_latencies=true") as server:

        async def run() -> None:
            client = grpcaio.InferenceServerClient(server.grpc)
            await closed_loop(grpc_resnet(client, "resnet18"), 2, 2)  # warm both
            await closed_loop(grpc_resnet(client, "resnet18_target"), 2, 2)
            capacity = await closed_loop(grpc_resnet(client, "resnet18"), 16, seconds)
            # Clients that obey the refusals' turns first: after a flood of clients that ignore
            # them, the line of turns told reaches up to a second ahead for a second.
            retrying = grpcaio.InferenceServerClient(server.grpc, channel_args=RETRYING)
            obeying = await closed_loop(grpc_resnet(retrying, "resnet18_target"), 16, seconds)
            saturated = await closed_loop(grpc_resnet(client, "resnet18_target"), 16, seconds)
            print(f"capacity (fixed delay, 16 in flight): {capacity:.1f} infer/s")
            print(
                f"saturation with the {target_ms:g} ms target, 16 clients that resend at once: "
                f"{saturated:.1f} infer/s answered ({saturated / capacity:.2f} of the fixed "
                "config's)"
            )
            print(
                f"saturation with the {target_ms:g} ms target, 16 clients whose gRPC retry "
                f"policy waits out each refusal's grpc-retry-pushback-ms: {obeying:.1f} infer/s "
                f"answered ({obeying / capacity:.2f} of the fixed config's)"
            )
            answered = {}
            for model in ("resnet18", "resnet18_target"):
                await drain(server, model)
                tally = Tally([])
                started = time.monotonic()
                await open_loop(grpc_resnet(client, model), 2 * capacity, seconds, tally)
                answered[model] = len(tally.ok) / (time.monotonic() - started)
            print(
                f"saturation, open-loop arrivals at 2x capacity: fixed {answered['resnet18']:.1f}"
                f", target {answered['resnet18_target']:.1f} infer/s answered "
                f"({answered['resnet18_target'] / answered['resnet18']:.2f})"
            )
            for share in (0.4, 0.6, 0.8):
                row = []
                for model in ("resnet18", "resnet18_target"):
                    await drain(server, model)
                    tally = Tally([])
                    before = request_buckets(server, model)
                    await open_loop(grpc_resnet(client, model), share * capacity, seconds, tally)
                    inside = server_p99_ms(before, request_buckets(server, model))
                    sent = len(tally.ok) + tally.refused + tally.other
                    row.append(
                        f"{model:15s} p99 {p99_ms(tally.ok):6.1f} ms (server {inside:5.1f}), "
                        f"refused {tally.refused / max(sent, 1):5.1%}"
                    )
                print(f"  load {share:.1f} x capacity: " + " | ".join(row))
            await client.close()

        asyncio.run(run())
        stats = statistics(server, "resnet18_target")
        if stats["fail"]:
            print(
                f"refusals: {stats['fail']}, server time per refusal "
                f"{stats['fail_ns'] / stats['fail'] / 1e6:.3f} ms (statistics' fail duration)"
            )


# -- deadlines ---------------------------------------------------------------------------------


def bench_deadlines(scratch: Path, seconds: float) -> None:
    repository = scratch / "deadlines"
    models.write_python_model(repository, "flat", FLAT, _flat_config("flat", 0.04, 2))
    with serve(repository) as server:

        async def run() -> None:
            client = httpaio.InferenceServerClient(server.http, conn_limit=512)

            x = np.ones((1, 1), np.float32)

            def call(timeout_us: int | None) -> Call:
                async def one() -> None:
                    tensor = httpaio.InferInput("X", [1, 1], "FP32")
                    tensor.set_data_from_numpy(x)
                    request = client.infer("flat", [tensor], timeout=timeout_us)
                    await asyncio.wait_for(request, 0.1)  # the client gives up at 100 ms

                return one

            async def unbounded() -> None:
                tensor = httpaio.InferInput("X", [1, 1], "FP32")
                tensor.set_data_from_numpy(x)
                await client.infer("flat", [tensor])

            await closed_loop(unbounded, 2, 2)
            capacity = await closed_loop(unbounded, 8, seconds)
            print(f"capacity (HTTP, 8 in flight): {capacity:.1f} infer/s; offered 2x that")
            for label, timeout_us in (("without timeout", None), ("timeout 100000 us", 100_000)):
                before = statistics(server, "flat")
                expired_before = metric(server, "convoy_inference_deadline_exceeded", "flat")
                tally = Tally([])
                await open_loop(call(timeout_us), 2 * capacity, seconds, tally)
                drained_s = await drain(server, "flat")  # it still runs for clients long gone
                after = statistics(server, "flat")
                expired = metric(server, "convoy_inference_deadline_exceeded", "flat")
                good = sum(1 for latency in tally.ok if latency <= 0.1)
                executed = after["inferences"] - before["inferences"]
                print(
                    f"  {label:18s} goodput {good / seconds:6.1f}/s; answered {len(tally.ok)}, "
                    f"gave up {tally.late}, refused {tally.refused}; the server executed "
                    f"{executed} (no answer wanted for {executed - len(tally.ok)}; "
                    f"{drained_s:.1f} s after the last request), counted "
                    f"{expired - expired_before:.0f} expired"
                )
            await client.close()

        asyncio.run(run())


# -- fair share --------------------------------------------------------------------------------

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


def _flat_config(name: str, sleep_s: float, max_batch_size: int, fair: bool = False) -> str:
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


HEAVY_LEAD_S = 1.0  # the heavy client's sending before the light clients' window opens


def bench_fair(scratch: Path, seconds: float) -> None:
    repository = scratch / "fair"
    for name, fair in (("flat_fifo", False), ("flat_fair", True)):
        models.write_python_model(repository, name, FLAT, _flat_config(name, 0.1, 4, fair))
    light_rate = 4.0  # each light client; the heavy one sends 10x, past the 40/s capacity
    with serve(repository, "--fair-share-header", "x-client") as server:

        async def run() -> None:
            client = grpcaio.InferenceServerClient(server.grpc)
            x = np.ones((1, 1), np.float32)

            def call(model: str, who: str) -> Call:
                async def one() -> None:
                    tensor = grpcaio.InferInput("X", [1, 1], "FP32")
                    tensor.set_data_from_numpy(x)
                    await client.infer(model, [tensor], headers={"x-client": who})

                return one

            for model in ("flat_fifo", "flat_fair"):
                await closed_loop(call(model, "warm"), 1, 1)
                alone = [Tally([]) for _ in range(3)]
                await asyncio.gather(
                    *(
                        open_loop(call(model, f"light{i}"), light_rate, seconds, alone[i])
                        for i in range(3)
                    )
                )
                beside = [Tally([]) for _ in range(3)]
                # The heavy client runs in a process of its own, so that its backlog of calls
                # does not slow the light clients' event loop; the light clients start once it
                # sends and has built a backlog, so that its start-up's CPU (imports, a
                # channel) falls outside their window.
                heavy = await asyncio.create_subprocess_exec(
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--heavy",
                    server.grpc,
                    model,
                    str(10 * light_rate),
                    str(seconds + HEAVY_LEAD_S),
                    stdout=asyncio.subprocess.PIPE,
                )
                assert heavy.stdout is not None
                await heavy.stdout.readline()  # it sends
                await asyncio.sleep(HEAVY_LEAD_S)
                await asyncio.gather(
                    *(
                        open_loop(call(model, f"light{i}"), light_rate, seconds, beside[i])
                        for i in range(3)
                    )
                )
                heavy_out, _ = await heavy.communicate()
                alone_p99 = p99_ms([t for tally in alone for t in tally.ok])
                beside_p99 = p99_ms([t for tally in beside for t in tally.ok])
                print(
                    f"  {model}: light clients' p99 alone {alone_p99:7.1f} ms, beside the heavy "
                    f"one {beside_p99:7.1f} ms ({beside_p99 / alone_p99:.2f}x); heavy "
                    f"{heavy_out.decode().strip()}"
                )
            await client.close()

        asyncio.run(run())


# -- keep-alive --------------------------------------------------------------------------------


def bench_keep_alive(scratch: Path, rounds: int = 3) -> None:
    repository = scratch / "keep_alive"
    model_dir = write_mlp(repository)
    config = model_dir / "config.pbtxt"
    config.write_text(
        config.read_text()
        + 'parameters { key: "convoy_keep_alive_s" value: { string_value: "1" } }\n'
    )
    x = np.random.default_rng(0).random((1, 256), dtype=np.float32)
    with serve(repository, "--model-control-mode", "explicit") as server:

        async def run() -> None:
            client = grpcaio.InferenceServerClient(server.grpc)

            async def infer() -> None:
                tensor = grpcaio.InferInput("INPUT", [1, 256], "FP32")
                tensor.set_data_from_numpy(x)
                await client.infer("mlp", [tensor])

            started = time.monotonic()
            await client.load_model("mlp")
            print(f"explicit load: {(time.monotonic() - started) * 1000:.1f} ms")
            for round_ in range(rounds):
                await infer()
                while await client.is_model_ready("mlp"):
                    await asyncio.sleep(0.05)
                cold_us = metric(server, "convoy_model_cold_start_duration_us", "mlp")
                racing = 32 if round_ == rounds - 1 else 1
                started = time.monotonic()

                async def timed(started: float = started) -> float:
                    await infer()
                    return (time.monotonic() - started) * 1000

                outcomes = await asyncio.gather(
                    *(timed() for _ in range(racing)), return_exceptions=True
                )
                answered = sorted(o for o in outcomes if isinstance(o, float))
                load_ms = (
                    metric(server, "convoy_model_cold_start_duration_us", "mlp") - cold_us
                ) / 1000
                print(
                    f"  cold start {round_ + 1}: the load took {load_ms:.1f} ms; of {racing} "
                    f"request(s) the first answered in {answered[0]:.1f} ms "
                    f"(+{answered[0] - load_ms:.1f} ms), the last in {answered[-1]:.1f} ms; "
                    f"failed {racing - len(answered)}"
                )
            print(
                f"  loads: {metric(server, 'convoy_model_cold_starts', 'mlp'):.0f} cold starts "
                f"for {metric(server, 'convoy_model_idle_unloads', 'mlp'):.0f} idle unloads"
            )
            await client.close()

        asyncio.run(run())


async def _heavy(url: str, model: str, rate: float, seconds: float) -> None:
    """The fair-share bench's heavy client (its own process): prints its answers' p99."""
    client = grpcaio.InferenceServerClient(url)
    x = np.ones((1, 1), np.float32)

    async def one() -> None:
        tensor = grpcaio.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(x)
        await client.infer(model, [tensor], headers={"x-client": "heavy"})

    tally = Tally([])
    print("sending", flush=True)
    await open_loop(one, rate, seconds, tally)
    await client.close()
    print(f"p99 {p99_ms(tally.ok):7.1f} ms over {len(tally.ok)} answers")


BENCHES: dict[str, Callable[[Path, argparse.Namespace], None]] = {
    "target": lambda scratch, args: bench_target(scratch, args.seconds, args.target_ms),
    "deadlines": lambda scratch, args: bench_deadlines(scratch, args.seconds),
    "fair": lambda scratch, args: bench_fair(scratch, args.seconds),
    "keep-alive": lambda scratch, args: bench_keep_alive(scratch),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benches", nargs="*", help=f"any of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each window")
    parser.add_argument("--target-ms", type=float, default=50.0, help="the target bench's target")
    parser.add_argument("--heavy", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.heavy:
        url, model, rate, seconds = args.heavy
        asyncio.run(_heavy(url, model, float(rate), float(seconds)))
        return 0
    unknown = sorted(set(args.benches) - set(BENCHES))
    if unknown:
        parser.error(f"unknown bench(es) {unknown}: choose from {', '.join(BENCHES)}")
    for name in args.benches or list(BENCHES):
        print(f"== {name}", flush=True)
        with tempfile.TemporaryDirectory() as scratch:
            BENCHES[name](Path(scratch), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
