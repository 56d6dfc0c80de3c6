"""Overload: more requests in flight than a model's queue takes. Prints, from one run, how many
were answered and refused, and the latency (p50/p99) of each kind: a refusal should cost little
and never slow down the accepted requests.

The model is the example resnet18 with `max_queue_size: 8`; 64 requests are kept in flight over
gRPC (tritonclient.grpc.aio, one channel per 8 requests). The same run first drives, with the same
client and requests, a bare grpc.aio server (uvloop, as Convoy) whose ModelInfer does nothing but
refuse, in as many processes on one port as Convoy has front ends: the floor of a refusal's cost
in any grpc.aio front end on this machine, which Convoy's refusals are printed against.

Usage: python scripts/overload_bench.py [--seconds 10] [--in-flight 64] [--frontend-workers 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import numpy as np
import tritonclient.grpc.aio as aioclient
import uvloop
from tritonclient.utils import InferenceServerException

from proto import grpc_service_pb2 as pb
from scripts.gen_models import write_resnet18

SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+)")
ROOT = Path(__file__).resolve().parents[1]
QUEUE = "dynamic_batching {\n  default_queue_policy { max_queue_size: 8 }\n"


def _percentiles(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p99 = np.percentile(values, [50, 99])
    return f"p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"


async def _drive(url: str, seconds: float, in_flight: int) -> tuple[list[float], list[float], int]:
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    clients = [aioclient.InferenceServerClient(url) for _ in range(max(1, in_flight // 8))]
    accepted: list[float] = []
    refused: list[float] = []
    other = 0
    deadline = time.monotonic() + seconds

    async def loop(client: aioclient.InferenceServerClient) -> None:
        nonlocal other
        tensor = aioclient.InferInput("input", [1, 3, 224, 224], "FP32")
        tensor.set_data_from_numpy(image)
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                await client.infer("resnet18", [tensor])
                accepted.append((time.perf_counter() - start) * 1000)
            except InferenceServerException as error:
                if "UNAVAILABLE" in str(error.status()):
                    refused.append((time.perf_counter() - start) * 1000)
                else:
                    other += 1
                    if other == 1:
                        print(f"  first other error: {error}")

    await asyncio.gather(*(loop(clients[i % len(clients)]) for i in range(in_flight)))
    for client in clients:
        await client.close()
    return accepted, refused, other


async def _refuse_everything(port: int) -> None:
    """The floor: a grpc.aio server whose ModelInfer refuses at once, as Convoy's full queue;
    on `port` (0: any), which other such processes may share."""

    async def infer(request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")

    handler = grpc.unary_unary_rpc_method_handler(
        infer,
        request_deserializer=pb.ModelInferRequest.FromString,
        response_serializer=pb.ModelInferResponse.SerializeToString,
    )
    service = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": handler}
    )
    options = [("grpc.max_receive_message_length", 1 << 30), ("grpc.so_reuseport", 1)]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers([service])
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"serving gRPC on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    await server.wait_for_termination()


@contextlib.contextmanager
def _server(command: list[str], log: Path) -> Iterator[int]:
    """A server process for the block; its gRPC port."""
    with log.open("wb") as sink:
        server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        for _ in range(1200):
            found = SERVING.search(log.read_text(errors="replace"))
            if found or server.poll() is not None:
                break
            time.sleep(0.1)
        if not found:
            raise SystemExit(f"the server did not start:\n{log.read_text(errors='replace')}")
        yield int(found.group(1))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--frontend-workers", type=int, default=0)
    parser.add_argument("--refuse-everything", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.refuse_everything is not None:
        uvloop.run(_refuse_everything(args.refuse_everything))
        return 0
    drive = (args.seconds, args.in_flight)
    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / "models"
        model_dir = write_resnet18(repository)
        config = model_dir / "config.pbtxt"
        text = config.read_text()
        config.write_text(text.replace("dynamic_batching {\n", QUEUE))
        command = [sys.executable, "-m", "server", "serve", "--model-repository", str(repository)]
        command += ["--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
        command += ["--frontend-workers", str(args.frontend_workers)]
        floor_command = [sys.executable, str(Path(__file__).resolve()), "--refuse-everything"]
        floor_processes = max(1, args.frontend_workers)
        with contextlib.ExitStack() as floor_servers:
            port = floor_servers.enter_context(
                _server([*floor_command, "0"], Path(scratch) / "floor-0.log")
            )
            for index in range(1, floor_processes):
                log = Path(scratch) / f"floor-{index}.log"
                floor_servers.enter_context(_server([*floor_command, str(port)], log))
            _, floor, _ = asyncio.run(_drive(f"127.0.0.1:{port}", *drive))
        with _server(command, Path(scratch) / "server.log") as port:
            accepted, refused, other = asyncio.run(_drive(f"127.0.0.1:{port}", *drive))
    print(
        f"resnet18, max_queue_size 8, {args.in_flight} in flight, {args.seconds:.0f} s, "
        f"{args.frontend_workers} front-end workers"
    )
    print(f"  accepted {len(accepted):6d}  {_percentiles(accepted)}")
    print(f"  refused  {len(refused):6d}  {_percentiles(refused)}")
    print(f"  other errors {other}")
    print(
        f"floor: a bare grpc.aio server refusing every request, {floor_processes} process(es) "
        "on one port, same client and load"
    )
    print(f"  refused  {len(floor):6d}  {_percentiles(floor)}")
    if floor and refused:
        ratios = np.percentile(refused, [50, 99]) / np.percentile(floor, [50, 99])
        print(f"  Convoy's refusals / the floor's: p50 {ratios[0]:.2f}x  p99 {ratios[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
