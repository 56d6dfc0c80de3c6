"""`WorkerProcess`: the server's end of one worker: start, readiness checks, the model's questions,
finalize, kill; its messages travel through `ServerChannel`.

The worker is a plain subprocess running `_worker.py` by path, not a multiprocessing child: spawn
would import the server's packages and re-run its `__main__` in every worker, non-daemon children
are joined at interpreter exit (a hung model would hang shutdown), and daemon ones may not start
processes of their own. A socketpair is the channel, so a model's prints on stdout cannot corrupt
it. The worker leads its own session: a Ctrl-C at the server's terminal does not interrupt a
model mid-batch, and killing the session also ends processes the model started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.python._asks import (
    ASK_CANCEL,
    ASK_SERVER,
    ASK_UPDATE,
    CANCEL_CHECK,
    LARGEST_ASK_BYTES,
    LENGTH,
)
from backends.python._environment import ExecutionEnvironment
from backends.python._ring import RING_BYTES, Ring
from backends.python._server_channel import POLL_S, ServerChannel, WorkerFailure, WorkerRefused

_WORKER_SCRIPT = Path(__file__).with_name("_worker.py")
_ASKS = (ASK_CANCEL, ASK_SERVER, ASK_UPDATE)
_EXIT_GRACE_S = 5.0  # after finalize, how long the worker may take to exit before it is killed


@dataclass(frozen=True, slots=True)
class AskAnswers:
    """How the server answers a worker's questions on their own socket (`answer_asks`)."""

    cancelled: Callable[[int, int], bool]  # (batch, request index): its caller went away
    # A request of custom metrics or of the model loading API -> its answer.
    server: Callable[[dict[str, Any]], dict[str, Any]]


class WorkerProcess(ServerChannel):
    """One running worker: started, asked, finalized and killed; its channel is a
    `ServerChannel`."""

    def __init__(
        self, process: subprocess.Popen[bytes], sock: socket.socket, outgoing: Ring, incoming: Ring
    ) -> None:
        super().__init__(process, sock, outgoing, incoming)
        self._readiness: socket.socket | None = None  # readiness checks' own socket
        self._asks: socket.socket | None = None  # the model's is_cancelled() questions' own
        self.checks_readiness = False  # the model defines `is_ready` (known once initialized)

    @classmethod
    def start(
        cls,
        spec: dict[str, Any],
        deadline_ns: int,
        answers: AskAnswers,
        ring_bytes: int = RING_BYTES,
        environment: ExecutionEnvironment | None = None,
    ) -> WorkerProcess:
        """Start a worker and have it import model.py and run initialize(spec['args']); its
        questions get `answers` from then on (initialize may register custom metrics), on a
        thread of their own; `ring_bytes`: each direction's shared memory; `environment`: the
        model's own interpreter (None: the server's)."""
        worker = cls._spawn(ring_bytes, environment)
        threading.Thread(
            target=worker.answer_asks,
            args=(answers,),
            name=f"{spec['instance_name']}-asks",
            daemon=True,
        ).start()
        try:
            worker.send(("initialize", spec), deadline_ns)
            reply = worker.receive(deadline_ns)
            if reply[0] != "ready":
                raise WorkerRefused(str(reply[1]))
        except WorkerFailure:
            worker.kill()
            raise
        worker.checks_readiness = bool(reply[1])
        return worker

    @classmethod
    def auto_complete(
        cls,
        spec: dict[str, Any],
        deadline_ns: int,
        environment: ExecutionEnvironment | None = None,
    ) -> dict[str, Any]:
        """Run the model's `auto_complete_config` in a worker of its own, which then exits: the
        completed config (as the JSON dict `args['model_config']` holds)."""
        worker = cls._spawn(environment=environment)
        try:
            worker.send(("auto_complete", spec), deadline_ns)
            reply = worker.receive(deadline_ns)
        finally:
            worker.kill()
        if reply[0] != "completed" or not isinstance(reply[1], dict):
            raise WorkerRefused(str(reply[1]) if len(reply) > 1 else f"answered {reply[0]!r}")
        return reply[1]

    @classmethod
    def _spawn(
        cls, ring_bytes: int = RING_BYTES, environment: ExecutionEnvironment | None = None
    ) -> WorkerProcess:
        ours, theirs = socket.socketpair()
        # Readiness checks have a socket of their own: one runs while a batch executes; so do
        # the model's is_cancelled() questions, which any of its threads asks at any time.
        ours_ready, theirs_ready = socket.socketpair()
        ours_ask, theirs_ask = socket.socketpair()
        rings: list[Ring] = []
        try:
            rings = [Ring.create(f"convoy-python-{way}", ring_bytes) for way in ("in", "out")]
            fds = (
                theirs.fileno(),
                *(ring.fd for ring in rings),
                theirs_ready.fileno(),
                theirs_ask.fileno(),
            )
            python = sys.executable if environment is None else environment.python
            process = subprocess.Popen(
                [python, str(_WORKER_SCRIPT), *map(str, fds)],
                pass_fds=fds,
                env=None if environment is None else environment.variables,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            ours_ready.close()
            ours_ask.close()
            for ring in rings:
                ring.close()
            raise WorkerFailure(f"could not be started: {exc}") from exc
        finally:
            # Only the worker may hold its ends: then its exit reaches us as EOF.
            theirs.close()
            theirs_ready.close()
            theirs_ask.close()
        worker = cls(process, ours, *rings)
        worker._readiness = ours_ready
        worker._asks = ours_ask
        return worker

    def answer_asks(self, answers: AskAnswers) -> None:
        """Until the worker ends: answer each of its questions on their own socket, an
        is_cancelled() (one byte) or a request of custom metrics or model loading (JSON);
        blocking."""
        sock = self._asks
        if sock is None:
            return
        try:
            while (tag := sock.recv(1, socket.MSG_WAITALL)) in _ASKS:
                if tag == ASK_CANCEL:
                    asked = sock.recv(CANCEL_CHECK.size, socket.MSG_WAITALL)
                    if len(asked) < CANCEL_CHECK.size:
                        return  # the worker ended
                    sock.sendall(b"1" if answers.cancelled(*CANCEL_CHECK.unpack(asked)) else b"0")
                    continue
                head = sock.recv(LENGTH.size, socket.MSG_WAITALL)
                if len(head) < LENGTH.size or LENGTH.unpack(head)[0] > LARGEST_ASK_BYTES:
                    return  # the worker ended, or says it sends more than the server takes
                try:
                    request = json.loads(sock.recv(LENGTH.unpack(head)[0], socket.MSG_WAITALL))
                except ValueError:
                    return  # a broken question: the worker's channel is no longer to be trusted
                answer = (
                    answers.server(request)
                    if isinstance(request, dict)
                    else {"error": "a request to the server must be a JSON object"}
                )
                if tag == ASK_UPDATE:
                    continue  # checked by the worker's pb_utils; nobody waits for the answer
                body = json.dumps(answer).encode()
                sock.sendall(LENGTH.pack(len(body)) + body)
        except OSError:
            return

    def check_ready(self) -> bool:
        """The model's `is_ready()` answer (one byte each way on the readiness socket); False
        when the worker ends first. Blocks while is_ready runs: the caller bounds its own wait,
        and runs one check at a time."""
        sock = self._readiness
        if sock is None:
            return False
        try:
            sock.settimeout(None)
            sock.sendall(b"?")
            sock.settimeout(POLL_S)
            while True:
                try:
                    answer = sock.recv(1)
                    break
                except TimeoutError:
                    if self._process.poll() is not None:  # a model's child may hold the socket
                        return False
        except OSError:
            return False
        return answer == b"1"

    def finalize(self, deadline_ns: int) -> str | None:
        """Have the model's finalize() run and the worker exit; the error it reported, if any."""
        try:
            self.send(("finalize",), deadline_ns)
            message = self.receive(deadline_ns)
            while message[0] != "finalized":
                message = self.receive(deadline_ns)
        except WorkerFailure as failure:
            self.kill()
            return f"finalize did not complete: the worker {failure.reason}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=_EXIT_GRACE_S)
        self.kill()
        return None if message[1] is None else str(message[1])

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def wait(self) -> int:
        """Block until the worker ends; its exit code."""
        return self._process.wait()

    def kill(self) -> None:
        """End the worker and everything it started, now."""
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except OSError:  # already gone, or not its own group: end the process itself
                self._process.kill()
        self._process.wait()
        self._sock.close()
        self._sender.close()
        for side in (self._readiness, self._asks):
            if side is not None:
                side.close()
        self._outgoing.close()
        self._incoming.close()
