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
       [--target-ms 50] [--server-cpus 1 --client-cpus 0]

With --server-cpus and --client-cpus the servers and this load generator run on CPUs of their own
(as a server and its remote clients would): on a machine whose few cores they otherwise share, the
clients' work slows whatever the server computes beside it, and a policy that keeps the server
busy in small batches while clients send pays for it where one that waits for big batches does
not. The target bench prints, for each saturation phase, how busy the model's instance was and
what an image cost it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio

from scripts import models
from scripts.gen_models import write_mlp, write_resnet18
from scripts.latency_fair import bench_fair
from scripts.latency_harness import (
    BUCKETS_US,
    FLAT,
    REQUEST_HISTOGRAM,
    RETRYING,
    Call,
    Tally,
    batch_times,
    closed_loop,
    cpu_list,
    drain,
    flat_config,
    grpc_resnet,
    instance_use,
    metric,
    open_loop,
    p99_ms,
    request_buckets,
    serve,
    server_p99_ms,
    statistics,
)


def bench_target(
    scratch: Path, seconds: float, target_ms: float = 50.0, cpus: str | None = None
) -> None:
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
    with serve(repository, "--metrics-config", "histogram_latencies=true", cpus=cpus) as server:

        async def run() -> None:
            client = grpcaio.InferenceServerClient(server.grpc)
            await closed_loop(grpc_resnet(client, "resnet18"), 2, 2)  # warm both
            await closed_loop(grpc_resnet(client, "resnet18_target"), 2, 2)

            async def timed(model: str, phase: Awaitable[float]) -> tuple[float, str]:
                before, started = batch_times(server, model), time.monotonic()
                result = await phase
                elapsed = time.monotonic() - started
                return result, instance_use(before, batch_times(server, model), elapsed)

            capacity, fixed_use = await timed(
                "resnet18", closed_loop(grpc_resnet(client, "resnet18"), 16, seconds)
            )
            # Clients that obey the refusals' turns first: after a flood of clients that ignore
            # them, the line of turns told reaches up to a second ahead for a second.
            retrying = grpcaio.InferenceServerClient(server.grpc, channel_args=RETRYING)
            obeying, obeying_use = await timed(
                "resnet18_target",
                closed_loop(grpc_resnet(retrying, "resnet18_target"), 16, seconds),
            )
            saturated = await closed_loop(grpc_resnet(client, "resnet18_target"), 16, seconds)
            print(f"capacity (fixed delay, 16 in flight): {capacity:.1f} infer/s; {fixed_use}")
            print(
                f"saturation with the {target_ms:g} ms target, 16 clients that resend at once: "
                f"{saturated:.1f} infer/s answered ({saturated / capacity:.2f} of the fixed "
                "config's)"
            )
            print(
                f"saturation with the {target_ms:g} ms target, 16 clients whose gRPC retry "
                f"policy waits out each refusal's grpc-retry-pushback-ms: {obeying:.1f} infer/s "
                f"answered ({obeying / capacity:.2f} of the fixed config's); {obeying_use}"
            )

            async def flooded(model: str) -> float:  # answers per second
                tally, started = Tally([]), time.monotonic()
                await open_loop(grpc_resnet(client, model), 2 * capacity, seconds, tally)
                return len(tally.ok) / (time.monotonic() - started)

            answered, use = {}, {}
            for model in ("resnet18", "resnet18_target"):
                await drain(server, model)
                answered[model], use[model] = await timed(model, flooded(model))
            print(
                f"saturation, open-loop arrivals at 2x capacity: fixed {answered['resnet18']:.1f}"
                f", target {answered['resnet18_target']:.1f} infer/s answered "
                f"({answered['resnet18_target'] / answered['resnet18']:.2f}); fixed: "
                f"{use['resnet18']}; target: {use['resnet18_target']}"
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


def bench_deadlines(scratch: Path, seconds: float, cpus: str | None = None) -> None:
    repository = scratch / "deadlines"
    models.write_python_model(repository, "flat", FLAT, flat_config("flat", 0.04, 2))
    with serve(repository, cpus=cpus) as server:

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


# -- keep-alive --------------------------------------------------------------------------------


def bench_keep_alive(scratch: Path, cpus: str | None = None, rounds: int = 3) -> None:
    repository = scratch / "keep_alive"
    model_dir = write_mlp(repository)
    config = model_dir / "config.pbtxt"
    config.write_text(
        config.read_text()
        + 'parameters { key: "convoy_keep_alive_s" value: { string_value: "1" } }\n'
    )
    x = np.random.default_rng(0).random((1, 256), dtype=np.float32)
    with serve(repository, "--model-control-mode", "explicit", cpus=cpus) as server:

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


BENCHES: dict[str, Callable[[Path, argparse.Namespace], None]] = {
    "target": lambda scratch, args: bench_target(
        scratch, args.seconds, args.target_ms, args.server_cpus
    ),
    "deadlines": lambda scratch, args: bench_deadlines(scratch, args.seconds, args.server_cpus),
    "fair": lambda scratch, args: bench_fair(scratch, args.seconds, args.server_cpus),
    "keep-alive": lambda scratch, args: bench_keep_alive(scratch, args.server_cpus),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benches", nargs="*", help=f"any of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each window")
    parser.add_argument("--target-ms", type=float, default=50.0, help="the target bench's target")
    parser.add_argument(
        "--server-cpus", help="the CPUs the servers run on (a taskset list, e.g. 1); default any"
    )
    parser.add_argument("--client-cpus", help="the CPUs this client runs on (e.g. 0); default any")
    args = parser.parse_args(argv)
    if args.server_cpus and shutil.which("taskset") is None:
        parser.error("--server-cpus needs taskset (util-linux)")
    if args.client_cpus:
        os.sched_setaffinity(0, cpu_list(args.client_cpus))
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
