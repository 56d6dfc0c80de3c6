"""The process boundary between front-end worker processes and the core, in one place.

A unary request from a worker reads in order: `client.py` (`CoreClient`, the worker's `Core`) ->
`messages.py` (every message and descriptor layout) over `frames.py` (framing, the batching
`Channel`), with tensors in `arena.py` (memfd arenas) -> `link.py` (`WorkerLink`, the core's side,
serving the core's own `Core`); an inference request crosses as its bytes, which the core decodes
with its front end's codec (`server.frontend.serialized`); every other `Core` method crosses as a
control call (`calls.py`). `pool.py` starts, watches and stops the worker processes; `process.py` is
a worker process's main. Nothing here imports the core: a worker loads no model runtime, and the
boundary is tested in one process over a socket pair."""

from server.workers.client import CoreClient
from server.workers.link import WorkerLink
from server.workers.pool import WorkerOptions, WorkerPool, reserve_port

__all__ = ["CoreClient", "WorkerLink", "WorkerOptions", "WorkerPool", "reserve_port"]
