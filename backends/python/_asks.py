"""`Asks`: a worker's questions on a socket of their own (`ASK_FD`), which the server answers at
any time, from any thread of the model. Runs in the worker, so it imports nothing from Convoy.

`request.is_cancelled()` sends ASK_CANCEL then (batch, index) as CANCEL_CHECK, answered b"1" or
b"0"; ASK_SERVER then a request of custom metrics (`pb_utils.MetricFamily`) or of the model
loading API (`pb_utils.load_model`) as LENGTH-prefixed JSON, answered the same way; or ASK_UPDATE
then a metric's update (increment, set, observe) the same way, not answered.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from typing import Any

# The questions on the asks socket, each a tag byte and its body (see the module's docs).
ASK_CANCEL, ASK_SERVER, ASK_UPDATE = b"c", b"m", b"u"
CANCEL_CHECK = struct.Struct("!qq")  # an is_cancelled() question: (batch, request index)
LENGTH = struct.Struct("!I")  # an ASK_SERVER or ASK_UPDATE request's (or answer's) JSON length
# The largest request a worker may send (its JSON; a model sent as files to `pb_utils.load_model`
# travels in it, base64-encoded): a model's bytes are not the server's memory to spend, and the
# server stops answering a worker that announces a larger one.
LARGEST_ASK_BYTES = 1 << 30


class Asks:
    """A worker's questions on their own socket, which the server answers at any time, from
    any thread of the model: `request.is_cancelled()`, custom metrics and model loading."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()

    def cancelled(self, batch: int, index: int) -> bool:
        with self._lock:
            self._sock.sendall(ASK_CANCEL + CANCEL_CHECK.pack(batch, index))
            return self._sock.recv(1, socket.MSG_WAITALL) == b"1"

    def server(self, request: dict[str, Any], answered: bool) -> dict[str, Any]:
        """pb_utils' server ask: the server's answer to one request; a metric's update
        (`answered` False) is sent without waiting, and the server carries it out in order."""
        body = json.dumps(request).encode()
        if len(body) > LARGEST_ASK_BYTES:
            return {"error": f"a request to the server holds {LARGEST_ASK_BYTES >> 20} MiB at most"}
        if not answered:
            with self._lock:
                self._sock.sendall(ASK_UPDATE + LENGTH.pack(len(body)) + body)
            return {}
        with self._lock:
            self._sock.sendall(ASK_SERVER + LENGTH.pack(len(body)) + body)
            head = self._sock.recv(LENGTH.size, socket.MSG_WAITALL)
            answer = self._sock.recv(LENGTH.unpack(head)[0], socket.MSG_WAITALL) if head else b""
        if not answer:
            return {"error": "the server closed the worker's channel"}
        reply: dict[str, Any] = json.loads(answer)
        return reply
