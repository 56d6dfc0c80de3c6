"""`ServerChannel`: the server's end of a worker's channel (its socket and a shared-memory ring
each way), messages sent and received within deadlines on a thread or on the event loop; and
`WorkerFailure`, what it raises when the worker does not answer."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

from backends.python._frames import (
    LEASE_NEW_BATCH,
    LEASE_NONE,
    LEASE_TO_BATCH,
    Reader,
    copied,
    encode_message,
    read_frame,
    send_what_fits,
    write_message,
)
from backends.python._pickling import Unpickler, stack_rows
from backends.python._ring import Ring

POLL_S = 0.2  # while waiting for a reply, how often to check that the worker still runs
_LOCK_POLL_S = 0.001  # on the event loop, how often to try the lock of a send in progress
# The channel's sockets block, each call bounded by the kernel (SO_RCVTIMEO, SO_SNDTIMEO): one
# system call per receive or send, where a Python timeout adds a poll and two fcntl calls.
_POLL_TIMEVAL = struct.pack("ll", 0, int(POLL_S * 1e6))
# The messages whose arrays the worker may keep in shared memory until their batch is answered.
_LEASES = {"execute": LEASE_NEW_BATCH, "called": LEASE_TO_BATCH}

# The only globals a worker's message may name besides the channel's own array builders
# (`_pickling`): what NumPy needs to rebuild the arrays those do not carry (non-contiguous ones,
# other dtypes). A model runs arbitrary code in its own process; it must not get to run any in
# the server's.
_ARRAY_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
    }
)


class WorkerFailure(Exception):
    """The worker did not answer in time, exited, refused to start or sent something unreadable.

    Never leaves this package: the instance turns it into a ModelLoadError or ExecutionError.
    """

    def __init__(
        self, reason: str, *, timed_out: bool = False, exit_code: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason  # completes "the worker ...", e.g. "exited with code 3"
        self.timed_out = timed_out
        self.exit_code = exit_code  # set when the worker process is known to have ended


class WorkerRefused(WorkerFailure):
    """The worker could not import model.py or initialize() raised; `reason` says which."""


class ServerChannel:
    """The server's end of one worker's channel, used by one party at a time (the event loop
    through `send_async` and `receive_async`, the instance's executor, or close), except `send`,
    which the answers to a model's calls use from other threads too. `process` is the worker at
    the other end: its exit tells why the channel broke."""

    def __init__(
        self, process: subprocess.Popen[bytes], sock: socket.socket, outgoing: Ring, incoming: Ring
    ) -> None:
        self._process = process
        self._sock = sock
        for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
            sock.setsockopt(socket.SOL_SOCKET, option, _POLL_TIMEVAL)
        self._reader = Reader(self._receive_into)
        self._read_deadline_ns = 0  # the receive in progress gives up then
        # Sends have a socket object of their own (the same socket): the answers to a model's
        # calls are sent from other threads while one reads, each within its own deadline.
        self._sender = socket.socket(fileno=os.dup(sock.fileno()))
        self._send_lock = threading.Lock()
        self._outgoing = outgoing  # the worker's inputs: an execute message's stay leased
        self._incoming = incoming  # copied out at once

    def send(self, message: tuple[Any, ...], deadline_ns: int) -> None:
        _waited(deadline_ns)
        try:  # the socket may be closed under us: a watcher saw the worker end and restarts it
            lease = _LEASES.get(message[0], LEASE_NONE)
            with self._send_lock:
                write_message(
                    self._sender,
                    _outgoing(message),
                    self._outgoing,
                    lease,
                    lambda: _waited(deadline_ns),
                )
        except OSError:
            raise self._lost() from None

    async def send_async(self, message: tuple[Any, ...], deadline_ns: int) -> None:
        """`send` on the event loop, which it never blocks: the socket takes what it can now
        (a whole message, from a worker that waits for one) and the rest as it drains."""
        while not self._send_lock.acquire(blocking=False):  # a thread sends a call's answer
            _waited(deadline_ns)
            await asyncio.sleep(_LOCK_POLL_S)
        try:
            parts = encode_message(
                _outgoing(message), self._outgoing, _LEASES.get(message[0], LEASE_NONE)
            )
            send_what_fits(self._sender, parts)
            while parts:
                _waited(deadline_ns)
                await self._ready(deadline_ns, writing=True)
                send_what_fits(self._sender, parts)
        except OSError:
            raise await asyncio.to_thread(self._lost) from None
        finally:
            self._send_lock.release()

    def receive(self, deadline_ns: int) -> tuple[Any, ...]:
        self._read_deadline_ns = deadline_ns
        try:
            data, buffers, entry, _ = read_frame(self._reader.read_exact, self._incoming)
            buffers = copied(self._incoming, buffers, entry)
        except EOFError:
            raise self._lost() from None
        except ValueError as exc:  # a descriptor outside the ring
            raise WorkerFailure(f"sent a message the server cannot read ({exc})") from exc
        try:
            message = Unpickler(data, buffers, _ARRAY_GLOBALS).load()
        except Exception as exc:  # any unpickling failure means the same: an unreadable message
            raise WorkerFailure(f"sent a message the server cannot read ({exc})") from exc
        if not isinstance(message, tuple) or not message:
            raise WorkerFailure(f"sent a malformed message ({type(message).__name__})")
        return message  # a "done" message's outputs may come stacked: `Replies.outcome` reads them

    async def receive_async(self, deadline_ns: int) -> tuple[Any, ...]:
        """`receive` on the event loop, which it never blocks: it waits for the whole message
        to arrive, then reads it (one larger than the channel's buffer is read on a thread)."""
        reader = self._reader
        while not reader.has_message():
            if reader.full:
                return await asyncio.to_thread(self.receive, deadline_ns)
            if _remaining_s(deadline_ns) <= 0:
                raise WorkerFailure("did not answer in time", timed_out=True)
            await self._ready(deadline_ns, writing=False)
            try:
                still_open = reader.take_arrived(self._receive_now)
            except OSError:
                still_open = False
            # The channel closed, or the worker ended (a process the model started may hold
            # the socket open): why, as `receive` says it.
            if not still_open or (not reader.has_message() and self._process.poll() is not None):
                raise await asyncio.to_thread(self._lost) from None
        return self.receive(deadline_ns)

    async def reply_async(self, batch: int, deadline_ns: int) -> tuple[Any, ...]:
        """The next message about `batch`, on the event loop; late ones about earlier batches
        are dropped, as `replies` drops them."""
        while True:
            message = await self.receive_async(deadline_ns)
            if len(message) > 1 and message[1] == batch:
                return message

    async def _ready(self, deadline_ns: int, writing: bool) -> None:
        """Until the socket is ready to read (or write), the deadline passes or POLL_S has
        gone by, whichever comes first."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        fd = self._sock.fileno()
        if writing:
            loop.add_writer(fd, _settle, waiter)
        else:
            loop.add_reader(fd, _settle, waiter)
        timer = loop.call_later(min(POLL_S, _remaining_s(deadline_ns)), _settle, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if writing:
                loop.remove_writer(fd)
            else:
                loop.remove_reader(fd)

    def replies(self, batch: int, deadline_ns: int) -> Iterator[tuple[Any, ...]]:
        """Messages about `batch`; late ones about earlier batches (a decoupled model's threads
        still sending after its batch failed) are dropped."""
        while True:
            message = self.receive(deadline_ns)
            if len(message) > 1 and message[1] == batch:
                yield message

    def _receive_into(self, view: memoryview) -> int:
        """Some bytes of the reply in progress (0: the worker closed the channel), within its
        deadline (checked every POLL_S); the socket may be closed under us, as in send."""
        while True:
            if _remaining_s(self._read_deadline_ns) <= 0:
                raise WorkerFailure("did not answer in time", timed_out=True)
            try:
                return self._sock.recv_into(view)
            except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO passed with nothing to read
                # A process the model started may hold the socket open after the worker died.
                if self._process.poll() is not None:
                    return self._left_behind(view)
            except OSError:
                raise self._lost() from None

    def _left_behind(self, view: memoryview) -> int:
        """What an ended worker sent before it ended (it may have answered and exited after
        the wait timed out, an auto-complete worker's way)."""
        try:
            return self._receive_now(view)  # 0: all read, it ended
        except OSError:  # nothing, and a process the model started holds the socket open
            raise self._lost() from None

    def _receive_now(self, view: memoryview) -> int:
        return self._sock.recv_into(view, 0, socket.MSG_DONTWAIT)

    def _lost(self) -> WorkerFailure:
        """Why the channel broke: almost always because the worker process ended."""
        try:
            code = self._process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return WorkerFailure("closed its channel")
        if code < 0 and -code in signal.valid_signals():
            return WorkerFailure(
                f"exited with code {code} ({signal.Signals(-code).name})", exit_code=code
            )
        return WorkerFailure(f"exited with code {code}", exit_code=code)


def _outgoing(message: tuple[Any, ...]) -> tuple[Any, ...]:
    """An execute message with its inputs stacked where they can be (`stack_rows`)."""
    if message[0] == "execute":
        return (*message[:2], stack_rows(message[2]), *message[3:])
    return message


def _settle(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _waited(deadline_ns: int) -> None:
    """A send that the worker has taken nothing of for a while: give up once past its
    deadline."""
    if _remaining_s(deadline_ns) <= 0:
        raise WorkerFailure("did not take the request in time", timed_out=True)


def _remaining_s(deadline_ns: int) -> float:
    return max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
