"""Front-end worker processes seen from the core: `WorkerPool` starts N of them on the same ports,
each with its channel and arenas served by a `WorkerLink`, restarts one that dies or whose event
loop stops answering, tells them the server's health and log settings, and stops them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from server.contract.core import Core
from server.contract.ports import probe_port
from server.workers import messages
from server.workers.arena import Arena
from server.workers.frames import Message
from server.workers.link import WorkerLink

_log = logging.getLogger(__name__)

RESTART_DELAY_S = 0.5  # between a worker's death and its replacement
HEARTBEAT_S = 1.0  # how often the core asks each worker's event loop for a PONG


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How the pool runs its workers."""

    count: int  # worker processes
    arena_bytes: int  # each worker's input arena, and its output arena
    settings: Mapping[str, Any]  # the front ends' settings, as plain values
    log_settings: Mapping[str, Any]  # Triton's log settings at start
    stop_timeout_s: float  # bound on a worker's drain at shutdown
    silent_timeout_s: float  # a worker whose loop has not answered for this long is killed


class WorkerPool:
    """N front-end worker processes on the same ports, each with its own channel and arenas."""

    def __init__(self, core: Core, options: WorkerOptions) -> None:
        self._core = core
        self._options = options
        self._links: dict[int, WorkerLink] = {}
        self._processes: dict[int, asyncio.subprocess.Process] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}  # by worker index
        self._serving = False
        self._log_settings = dict(options.log_settings)
        self._stopping = False

    async def start(self) -> tuple[int, int]:
        """Start every worker; returns the (gRPC, HTTP) ports they serve, once all serve."""
        ports = await asyncio.gather(*(self._spawn(index) for index in range(self._options.count)))
        return ports[0]

    async def stop_accepting(self, timeout_s: float) -> None:
        """Every worker refuses new requests; returns once each has said so (bounded), so that
        the requests they took before are in the core's hands, to be served, not refused."""
        self._broadcast((messages.STOPPING,))
        waits = [
            asyncio.wait(
                {worker_link.stopped, worker_link.lost},
                timeout=timeout_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for worker_link in self._links.values()
        ]
        await asyncio.gather(*waits)

    def set_health(self, serving: bool) -> None:
        self._serving = serving
        self._broadcast((messages.HEALTH, serving))

    async def stop(self) -> None:
        """SIGTERM every worker (each drains its calls), then wait; SIGKILL what lingers."""
        self._stopping = True
        for watcher in self._watchers.values():
            watcher.cancel()
        for process in self._processes.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for index, process in list(self._processes.items()):
            try:
                await asyncio.wait_for(process.wait(), self._options.stop_timeout_s)
            except TimeoutError:
                _log.warning("front-end worker %d did not stop; killing it", index)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for worker_link in self._links.values():
            worker_link.close()

    async def kill(self) -> None:
        """SIGKILL every worker still running (a forced stop), and wait for each."""
        self._stopping = True
        for watcher in self._watchers.values():
            watcher.cancel()
        for process in self._processes.values():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        for process in self._processes.values():
            await process.wait()
        for worker_link in self._links.values():
            worker_link.close()

    def _broadcast(self, message: Message) -> None:
        for worker_link in self._links.values():
            worker_link.send(message)

    def _logs_changed(self, settings: dict[str, Any]) -> None:
        self._log_settings = settings
        self._broadcast((messages.LOGS, settings))

    async def _spawn(self, index: int) -> tuple[int, int]:
        options = self._options
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        inputs = Arena.create(options.arena_bytes, f"convoy-inputs-{index}")
        outputs = Arena.create(options.arena_bytes, f"convoy-outputs-{index}")
        worker_link = WorkerLink(self._core, inputs, outputs, self._logs_changed)
        fds = (theirs.fileno(), inputs.fd, outputs.fd)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "server",
            "frontend",
            "--channel-fd",
            str(fds[0]),
            "--input-arena-fd",
            str(fds[1]),
            "--output-arena-fd",
            str(fds[2]),
            "--arena-bytes",
            str(options.arena_bytes),
            "--worker-index",
            str(index),
            pass_fds=fds,
        )
        theirs.close()
        ours.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: worker_link.channel, ours)
        info = self._core.info
        worker_link.send(
            (
                messages.WELCOME,
                dict(options.settings),
                info.tracing,
                info.cuda_shared_memory,
                self._serving,
                self._log_settings,
            )
        )
        self._links[index] = worker_link
        self._processes[index] = process
        try:
            ports = await worker_link.ready
        except ConnectionError:
            code = await process.wait()
            worker_link.close()
            raise OSError(f"front-end worker {index} exited with {code} before serving") from None
        self._watchers[index] = loop.create_task(self._watch(index, process, worker_link))
        _log.info("front-end worker %d (pid %d) serving", index, process.pid)
        return ports

    async def _watch(
        self, index: int, process: asyncio.subprocess.Process, worker_link: WorkerLink
    ) -> None:
        """Replace worker `index` if it dies; requests of other workers never notice."""
        heartbeat = asyncio.ensure_future(self._heartbeat(index, process, worker_link))
        try:
            code = await process.wait()
        finally:
            heartbeat.cancel()
        worker_link.close()
        if self._stopping:
            return
        _log.error(
            "front-end worker %d (pid %d) exited with %s; restarting it", index, process.pid, code
        )
        await asyncio.sleep(RESTART_DELAY_S)
        while not self._stopping:
            try:
                await self._spawn(index)
                return
            except OSError as exc:
                _log.error("front-end worker %d failed to start: %s", index, exc)
                await asyncio.sleep(RESTART_DELAY_S)

    async def _heartbeat(
        self, index: int, process: asyncio.subprocess.Process, worker_link: WorkerLink
    ) -> None:
        """Kill worker `index` once its event loop has not answered a PING for
        `silent_timeout_s` (a deadlock, a loop some work holds, a stopped process): its share of
        the ports' new connections, and of the liveness probes, would hang, and its process
        would not die by itself; `_watch` then starts its replacement."""
        started_s = time.monotonic()  # it serves: silence counts from now, not from its start
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            silent_s = time.monotonic() - max(worker_link.answered_s, started_s)
            if silent_s > self._options.silent_timeout_s and not self._stopping:
                _log.error(
                    "front-end worker %d (pid %d) has not answered for %.0f s; killing it",
                    index,
                    process.pid,
                    silent_s,
                )
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                return
            worker_link.send((messages.PING,))


def reserve_port(host: str, port: int, shared: bool = False) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket on host:port (0: a free port) that keeps the
    port for the workers; connections only ever reach listening sockets, the workers'.

    A port some other process listens on is refused first (EADDRINUSE), even if that process
    allows port sharing: a second server must never split a port's traffic with the first,
    unless `shared` says it may (Triton's --reuse-grpc-port, --reuse-http-port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if not shared:
        port = probe_port(host, port)
    reserved = socket.socket(family, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reserved.bind((host, port))
    except OSError as exc:
        reserved.close()
        raise OSError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return reserved
