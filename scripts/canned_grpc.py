"""The bare grpc.aio ceiling for scripts/bench.py: a server that answers ModelInfer with a canned
response (no tensor decode, no batching, no model), so what it serves is grpc.aio's own limit.

Usage: python scripts/canned_grpc.py CONFIG_PBTXT [--work-us N] [--idle-poll-us N] [--await-batch]

It serves the one model CONFIG_PBTXT describes on a free 127.0.0.1 port, on uvloop and with the
message size options Convoy's gRPC server sets, with gRPC's threads behind the event loop's as in
Convoy's processes (`server.contract.scheduling`; `CONVOY_LOOP_FIRST=0` for neither), and
prints `serving gRPC on 127.0.0.1:PORT` to stderr once it accepts calls. Besides ModelInfer it
answers what perf_analyzer asks first
(ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelConfig and
ModelStatistics, with zero counts) from that config; every answer is built once at start-up.
It needs only the generated modules in `proto`, and registers its service as Convoy's server
does (one generic handler, `server.frontend.grpc.inference_handler`; without looking for a load
report in ModelInfer's metadata, which is Convoy's own work), so that both pay the same grpc.aio
floor; its ModelInfer answer is serialized once, at start-up. `--work-us N` makes each ModelInfer
hold the event loop for N us of busy work before it answers: a server whose own work
per request takes N us, on grpc.aio's floor (scripts/handler_bench.py). By default its event
loop is grpc.aio's own: the floor as the framework gives it. `--idle-poll-us N` makes it poll for
N us after each answer (`server.contract.idle_poll`; its handler never awaits, so nothing is in
flight between answers): the lowest floor at c = 1, for comparing like with like there; at 8
clients and more it costs the bare server 5-25%, where Convoy's loop does not poll.
`--await-batch` makes each ModelInfer wait for its answer as a request waits for its batch in
Convoy: it parks a future and wakes one task, which answers every call waiting when it runs (a
batcher's loop without its rules, decode or model): what grpc.aio charges a handler that awaits.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import uvloop
from google.protobuf import text_format

from proto import grpc_service_pb2 as pb
from proto import grpc_service_pb2_grpc, model_config_pb2
from server.contract.idle_poll import DEFAULT_WINDOW_US, IdlePoll
from server.contract.scheduling import loop_first
from server.frontend.grpc import inference_handler

MESSAGE_LIMIT_BYTES = 64 * 1024 * 1024  # Convoy's default gRPC message limit
ITEM_BYTES = {"FP32": 4, "FP64": 8, "FP16": 2, "INT64": 8, "INT32": 4, "INT8": 1, "UINT8": 1}


def _datatype(data_type: int) -> str:
    """Triton's tensor datatype ("FP32") for a config data_type (TYPE_FP32)."""
    return model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")


class BatchGate:
    """Holds each call until its task runs, then answers every call waiting: the shape of a
    batcher's loop (one task woken by an event, one future per request), and nothing else."""

    def __init__(self) -> None:
        self._waiting: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            waiting, self._waiting = self._waiting, []
            for future in waiting:
                if not future.done():  # a cancelled call's
                    future.set_result(None)

    async def wait(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._wake.set()
        await future


class CannedServicer(grpc_service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers for one model, every one prebuilt from its config; ModelInfer echoes nothing."""

    def __init__(
        self,
        config: model_config_pb2.ModelConfig,
        work_us: int = 0,
        idle_poll_us: int = 0,
        gate: BatchGate | None = None,
    ) -> None:
        self._work_ns = work_us * 1000
        self._gate = gate
        # Its handler never awaits, so no call is in flight between answers: it polls after each.
        self._idle_poll = IdlePoll(idle_poll_us, lambda: False)
        batch = [-1] if config.max_batch_size > 0 else []
        self._metadata = pb.ModelMetadataResponse(
            name=config.name,
            versions=["1"],
            platform="onnxruntime_onnx",
            inputs=[
                pb.ModelMetadataResponse.TensorMetadata(
                    name=t.name, datatype=_datatype(t.data_type), shape=[*batch, *t.dims]
                )
                for t in config.input
            ],
            outputs=[
                pb.ModelMetadataResponse.TensorMetadata(
                    name=t.name, datatype=_datatype(t.data_type), shape=[*batch, *t.dims]
                )
                for t in config.output
            ],
        )
        self._config = pb.ModelConfigResponse(config=config)
        self._statistics = pb.ModelStatisticsResponse(
            model_stats=[pb.ModelStatistics(name=config.name, version="1")]
        )
        outputs = [(t.name, _datatype(t.data_type), [1, *t.dims]) for t in config.output]
        self._infer = pb.ModelInferResponse(
            model_name=config.name,
            model_version="1",
            outputs=[
                pb.ModelInferResponse.InferOutputTensor(name=name, datatype=datatype, shape=shape)
                for name, datatype, shape in outputs
            ],
            raw_output_contents=[
                bytes(ITEM_BYTES[datatype] * math.prod(shape)) for _, datatype, shape in outputs
            ],
        ).SerializeToString()

    async def ServerLive(self, request: object, context: object) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: object, context: object) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: object, context: object) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=True)

    async def ServerMetadata(self, request: object, context: object) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="canned", version="0")

    async def ModelMetadata(self, request: object, context: object) -> pb.ModelMetadataResponse:
        return self._metadata

    async def ModelConfig(self, request: object, context: object) -> pb.ModelConfigResponse:
        return self._config

    async def ModelStatistics(self, request: object, context: object) -> pb.ModelStatisticsResponse:
        return self._statistics

    async def ModelInfer(self, request: object, context: object) -> bytes:
        if self._gate is not None:
            await self._gate.wait()
        if self._work_ns:
            end_ns = time.perf_counter_ns() + self._work_ns
            while time.perf_counter_ns() < end_ns:
                pass
        self._idle_poll.idle()
        return self._infer


async def serve(
    config: model_config_pb2.ModelConfig,
    work_us: int = 0,
    idle_poll_us: int = 0,
    await_batch: bool = False,
) -> None:
    gate = BatchGate() if await_batch else None
    gate_task = None if gate is None else asyncio.create_task(gate.run())
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MESSAGE_LIMIT_BYTES),
            ("grpc.max_send_message_length", MESSAGE_LIMIT_BYTES),
        ]
    )
    server.add_generic_rpc_handlers(
        (inference_handler(CannedServicer(config, work_us, idle_poll_us, gate), load_report=False),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"serving gRPC on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    with loop_first(os.environ):  # the floor Convoy is measured against has it too
        await server.wait_for_termination()
    if gate_task is not None:
        gate_task.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the model's config.pbtxt")
    parser.add_argument(
        "--work-us", type=int, default=0, help="busy work per ModelInfer, in us (default 0)"
    )
    parser.add_argument(
        "--idle-poll-us",
        type=int,
        default=0,
        help="poll the event loop this long after each answer (Convoy's --idle-poll-us is "
        f"{DEFAULT_WINDOW_US} by default); default 0: grpc.aio's plain loop",
    )
    parser.add_argument(
        "--await-batch",
        action="store_true",
        help="each ModelInfer awaits its answer from one task that answers all waiting calls",
    )
    args = parser.parse_args(argv)
    config = text_format.Parse(
        args.config.read_text(encoding="utf-8"), model_config_pb2.ModelConfig()
    )
    uvloop.run(serve(config, args.work_us, args.idle_poll_us, args.await_batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
