"""`WorkerChannel`: the worker's end of its channel to the server (`_frames.py`), and how long
the arrays it receives stay in shared memory. Runs in the worker, so it imports only its siblings.

Who keeps what: the server copies what it receives out of the ring at once (its answers live on
after the worker's next batch). The worker hands the arrays of what the server leases (an
execute message's inputs, and the outputs of the BLS calls its model makes meanwhile) to the
model as they lie in the ring, without a copy, and releases them once the batch is answered: for
a model that is not decoupled when it sends "done" or "failed", for a decoupled one when,
besides, every request has sent its final flag. What a model keeps of them after that must be a
copy.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from ._frames import LEASE_NEW_BATCH, LEASE_TO_BATCH, Reader, copied, read_frame, write_message
from ._pickling import Unpickler, stack_rows, unstack_rows
from ._ring import Ring


class WorkerChannel:
    """The worker's end: one lock for sends (a decoupled model's threads send too); what an
    execute message leased is released when its batch is answered (see the module's docs)."""

    def __init__(self, sock: socket.socket, incoming: Ring, outgoing: Ring) -> None:
        self._sock = sock
        self._reader = Reader(sock.recv_into)
        self._incoming = incoming
        self._outgoing = outgoing
        self._lock = threading.Lock()
        self._batches: dict[int, _Batch] = {}  # leased batches not yet answered
        self._executing: _Batch | None = None  # the latest; a BLS call's outputs belong to it

    def send(self, message: object) -> None:
        with self._lock:
            batch = self._answered(message)
            if batch is not None:
                # Before the send: the server writes the ring again only after this reply,
                # and the send has read the outputs (which may be the inputs) by then.
                for entry in batch.entries:
                    self._incoming.release(entry)
            if type(message) is tuple and message[0] == "done" and type(message[2]) is list:
                message = (*message[:2], stack_rows(message[2]), *message[3:])
            write_message(self._sock, message, self._outgoing)

    def receive(self) -> Any:
        data, buffers, entry, lease = read_frame(self._reader.read_exact, self._incoming)
        with self._lock:
            batch = self._executing if lease == LEASE_TO_BATCH else None
            if entry is None or (lease != LEASE_NEW_BATCH and batch is None):
                buffers = copied(self._incoming, buffers, entry)
                entry = None
            message = Unpickler(data, buffers).load()
            if message[0] == "execute" and type(message[2]) is tuple:
                message = (*message[:2], unstack_rows(message[2]), *message[3:])
            if entry is not None and lease == LEASE_NEW_BATCH:
                self._executing = self._batches[message[1]] = _Batch([entry], len(message[2]))
            elif entry is not None and batch is not None:
                batch.entries.append(entry)
        return message

    def _answered(self, message: object) -> _Batch | None:
        """The batch `message` completes, if it does."""
        if not isinstance(message, tuple) or len(message) < 3:
            return None
        batch = self._batches.get(message[1])
        if batch is None:
            return None
        if message[0] == "failed":
            batch.returned = batch.decoupled_done = True
        elif message[0] == "done":
            batch.returned = True
            batch.decoupled_done |= message[2] is not None  # payloads: not decoupled
            batch.finals.update(message[4])  # rescheduled: their finals come in a later batch
            batch.decoupled_done |= len(batch.finals) >= batch.requests
        elif message[0] == "response" and message[4]:
            batch.finals.add(message[2])
            batch.decoupled_done = len(batch.finals) >= batch.requests
        if not (batch.returned and batch.decoupled_done):
            return None
        del self._batches[message[1]]
        if batch is self._executing:
            self._executing = None
        return batch


@dataclass(slots=True)
class _Batch:
    """A leased execute message's batch until it is answered."""

    entries: list[list[Any]]  # its ring entries: the execute message's, then its calls'
    requests: int
    finals: set[int] = field(default_factory=set)  # requests that sent their final flag
    returned: bool = False  # "done" or "failed" was sent
    decoupled_done: bool = False  # every request's final flag was sent (or none is due)
