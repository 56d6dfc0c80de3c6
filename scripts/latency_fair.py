"""The latency benches' fair-share bench (issue 35): three light clients' p99 alone, then beside
a client sending 10x each one's load, with convoy_fair_share and without. scripts/latency_bench.py
runs it (`fair`); run as a script, this module is the heavy client's own process.

Usage (the heavy client): python scripts/latency_fair.py URL MODEL RATE SECONDS
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc.aio as grpcaio

from scripts import models
from scripts.latency_harness import (
    FLAT,
    Call,
    Tally,
    closed_loop,
    flat_config,
    open_loop,
    p99_ms,
    serve,
)

HEAVY_LEAD_S = 1.0  # the heavy client's sending before the light clients' window opens


def bench_fair(scratch: Path, seconds: float, cpus: str | None = None) -> None:
    repository = scratch / "fair"
    for name, fair in (("flat_fifo", False), ("flat_fair", True)):
        models.write_python_model(repository, name, FLAT, flat_config(name, 0.1, 4, fair))
    light_rate = 4.0  # each light client; the heavy one sends 10x, past the 40/s capacity
    with serve(repository, "--fair-share-header", "x-client", cpus=cpus) as server:

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


async def heavy_client(url: str, model: str, rate: float, seconds: float) -> None:
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


if __name__ == "__main__":
    url, model, rate, seconds = sys.argv[1:]
    asyncio.run(heavy_client(url, model, float(rate), float(seconds)))
