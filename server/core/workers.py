"""Front-end worker processes seen from the core: `WorkerPool` starts N of them on the same ports,
restarts one that dies, tells them the server's health and log settings, and stops them;
`WorkerLink` serves one worker's channel (`server.contract.link`) with the in-process core."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from server.contract import link
from server.contract.arena import Allocator, Arena
from server.contract.errors import InternalError, ServerError, UnavailableError
from server.contract.ports import probe_port
from server.contract.responses import InferResponse
from server.contract.wire import Channel, Message
from server.core.local import LocalCore

_log = logging.getLogger(__name__)

RESTART_DELAY_S = 0.5  # between a worker's death and its replacement
CANCELLED = "the request was cancelled by its client"


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How the pool runs its workers."""

    count: int  # worker processes
    arena_bytes: int  # each worker's input arena, and its output arena
    settings: Mapping[str, Any]  # the front ends' settings, as plain values
    log_settings: Mapping[str, Any]  # Triton's log settings at start
    stop_timeout_s: float  # bound on a worker's drain at shutdown


class WorkerLink:
    """The core's side of one worker's channel."""

    def __init__(
        self,
        core: LocalCore,
        inputs: Arena,
        outputs: Arena,
        on_logs: Callable[[dict[str, Any]], None],
    ) -> None:
        self._core = core
        self._inputs = inputs  # the worker writes requests' inputs here
        self._outputs = outputs  # the core writes responses' outputs here
        self._allocator = Allocator(outputs.size_bytes)
        self._on_logs = on_logs
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.ready: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.channel = Channel(self._on_message, self._on_lost)

    def send(self, message: Message) -> None:
        if not self.lost.done():
            self.channel.send(message)

    def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._inputs.close()  # unmapped once the last view of it (a queued request's) is gone
        self._outputs.close()

    def _on_message(self, message: Message) -> None:
        kind = message[0]
        if kind == link.INFER:
            rid, stream, request = link.decode_infer(message, self._inputs)
            serve = self._serve_stream(rid, request) if stream else self._serve(rid, request)
            self._tasks[rid] = asyncio.get_running_loop().create_task(serve)
        elif kind == link.RELEASE:
            for offset in message[1]:
                self._allocator.release(offset)
        elif kind == link.CANCEL:
            task = self._tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == link.CALL:
            asyncio.get_running_loop().create_task(self._call(*message[1:]))
        elif kind == link.READY and not self.ready.done():
            self.ready.set_result((message[1], message[2]))
        elif kind == link.STOPPED and not self.stopped.done():
            self.stopped.set_result(None)

    def _on_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            _log.warning("front-end worker channel failed: %s", exc)
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the worker closed its channel at start"))

    async def _serve(self, rid: int, request: Any) -> None:
        try:
            response = await self._core.infer(request)
            self.send(link.encode_answer(rid, True, response, self._place(response)))
        except BaseException as exc:
            self._fail(rid, request, exc)
        finally:
            del self._tasks[rid]

    async def _serve_stream(self, rid: int, request: Any) -> None:
        final = False
        try:
            async for item, final in self._core.infer_stream(request):
                if isinstance(item, ServerError):
                    self.send(link.encode_failed(rid, item, final, in_band=True))
                else:
                    placements = () if item is None else self._place(item)
                    self.send(link.encode_answer(rid, final, item, placements))
            if not final:
                self.send((link.DONE, rid))
        except BaseException as exc:
            self._fail(rid, request, exc)
        finally:
            del self._tasks[rid]

    def _fail(self, rid: int, request: Any, exc: BaseException) -> None:
        """Request `rid` failed as a whole: its worker gets the error (and frees its inputs).
        A cancellation is the worker's own (its client left) or the core's shutdown."""
        if isinstance(exc, ServerError):
            error: ServerError = exc
        elif isinstance(exc, asyncio.CancelledError):
            error = UnavailableError(CANCELLED)
        elif isinstance(exc, Exception):
            _log.exception("request '%s' for model '%s' failed", request.request_id, request.model)
            error = InternalError(f"internal error: {exc}")
        else:  # KeyboardInterrupt, SystemExit: not the request's to report
            raise exc
        self.send(link.encode_failed(rid, error))

    def _place(self, response: InferResponse) -> list[link.Placement]:
        """Each output into the worker's output arena (freed when the worker says so), else
        inline; one the core wrote to a shared memory region carries nothing."""
        return [
            (link.SHARED, None)
            if output.array is None
            else link.place(output.array, output.spec.datatype, self._outputs, self._allocator)
            for output in response.outputs
        ]

    async def _call(self, cid: int, method: str, args: Any) -> None:
        try:
            if method not in link.CALLS:
                raise InternalError(f"unknown core call '{method}'")
            value = await getattr(self._core, method)(*link.decode_args(method, args))
            self.send((link.RESULT, cid, link.encode_result(method, value)))
            if method == "log_settings" and args[0]:
                self._on_logs(value)
        except ServerError as exc:
            self.send((link.REFUSED, cid, *link.error_message(exc)))
        except Exception as exc:
            _log.exception("core call '%s' failed", method)
            self.send((link.REFUSED, cid, InternalError.__name__, f"internal error: {exc}"))


class WorkerPool:
    """N front-end worker processes on the same ports, each with its own channel and arenas."""

    def __init__(self, core: LocalCore, options: WorkerOptions) -> None:
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
        self._broadcast((link.STOPPING,))
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
        self._broadcast((link.HEALTH, serving))

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

    def _broadcast(self, message: Message) -> None:
        for worker_link in self._links.values():
            worker_link.send(message)

    def _logs_changed(self, settings: dict[str, Any]) -> None:
        self._log_settings = settings
        self._broadcast((link.LOGS, settings))

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
                link.WELCOME,
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
        code = await process.wait()
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
