"""The process boundary with both sides in one process: a `CoreClient` and a `WorkerLink` on
the two ends of a socket pair, with two memfd arenas, as `WorkerPool` and a worker process set
them up; and the repository of generated models the boundary's tests serve
(tests/server/conftest.py's `served` core)."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnx import TensorProto

from scripts import gen_models, models
from server.core.local import LocalCore
from server.workers import CoreClient, WorkerLink, messages
from server.workers.arena import Arena

ARENA_BYTES = 1 << 20  # small, so that a large tensor finds it full and travels inline
SLOW_S = 0.4
SLOW = f"""
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_S})
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""


def write_repository(repo: Path) -> Path:
    gen_models.write_simple(repo)
    gen_models.write_identity_bytes(repo)
    gen_models.write_accumulate(repo)
    models.write_model(
        repo,
        "identity_fp32",
        models.identity(TensorProto.FLOAT),
        models.identity_config("identity_fp32", TensorProto.FLOAT, max_batch_size=1 << 17),
    )
    models.write_repeat_model(repo)
    # One instance, batches of one: a second request waits in the queue behind the first.
    models.write_python_model(
        repo,
        "slow",
        SLOW,
        'name: "slow"\nbackend: "python"\nmax_batch_size: 1\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\ndynamic_batching { }\n",
    )
    return repo


@dataclass
class Boundary:
    """The core in process, a client of it through the boundary, and the core's side of it."""

    core: LocalCore
    client: CoreClient
    link: WorkerLink
    logs_broadcast: list[dict[str, Any]] = field(default_factory=list)


async def connect(core: LocalCore, arena_bytes: int, boundary_logs: list[Any]) -> Boundary:
    """A link and a client on the two ends of a socket pair, with two arenas, as `WorkerPool`
    and a worker process set them up (the client attaches the arenas by descriptor)."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    inputs, outputs = Arena.create(arena_bytes), Arena.create(arena_bytes)
    link = WorkerLink(core, inputs, outputs, boundary_logs.append)
    # A worker inherits the arenas' descriptors; here each side owns a duplicate of them.
    client = CoreClient(
        Arena.attach(os.dup(inputs.fd), arena_bytes), Arena.attach(os.dup(outputs.fd), arena_bytes)
    )
    for sock in (ours, theirs):
        sock.setblocking(False)
    await loop.connect_accepted_socket(lambda: link.channel, ours)
    await loop.create_unix_connection(lambda: client.channel, sock=theirs)
    info = core.info
    link.send((messages.WELCOME, {}, info.tracing, info.cuda_shared_memory, True, {}))
    await client.welcome()
    client.ready(0, 0)
    await link.ready
    return Boundary(core, client, link, boundary_logs)


async def disconnect(boundary: Boundary) -> None:
    """The worker's end closes; the core's side sees it and lets its arenas go."""
    boundary.client.channel.close()
    await boundary.link.lost
    boundary.link.close()
