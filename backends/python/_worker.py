"""The worker process of one python model instance, and the messages it exchanges.

Run by path (`python _worker.py SOCKET_FD IN_FD OUT_FD READY_FD ASK_FD`), so it imports nothing
from Convoy: its siblings here (`_frames.py`, the framing; `_model_server.py`, the model's side)
are imported as a package of their own whose `__init__` never runs, and model.py sees a clean
interpreter with Triton's `triton_python_backend_utils` and the version directory on sys.path.
Messages are pickled tuples whose arrays lie in shared memory (`_frames.py`): an execute
message's inputs reach the model there without a copy, writable, as Triton's inputs are.

Parent -> worker: ("auto_complete", spec), answered ("completed", config) | ("failed", reason),
after which the worker exits; or ("initialize", spec) once, then ("execute", batch, inputs,
output_names, parameters) or ("finalize",). Worker -> parent: ("ready", checks_readiness) |
("failed", reason) after initialize, `checks_readiness` saying whether the model defines
`is_ready`; ("response", batch, index, payload, final) for each send of a decoupled model,
then ("done", batch, payloads, execute_ns, rescheduled) or ("failed", batch, reason);
("finalized", error | None). `rescheduled` lists the requests (indexes) an iterative sequence's
model rescheduled, to run again in a later batch: they answer nothing now (their payloads are
None), and a decoupled model sends their final flags in a later batch.
A payload is a dict of output arrays, a pair (that dict, the response parameters as a JSON
object string) when the model set any, an error message (str), or None (a bare final flag).
While execute runs, the model's questions go to the parent, which answers each with ("called",
call, ...): `InferenceRequest.exec` sends ("call", batch, call, model, version, inputs,
output_names, parameters, decoupled), answered with a payload (whose pair carries the called
model's response parameters) or, for a decoupled call, True (or the error); then each ("next",
batch, call) is answered (payload, final) and ("cancel", batch, call) ends the call.
In process, `request.is_cancelled()` sends ("is_cancelled", batch, call, index), answered with a
bool; a worker asks on a socket of its own (`ASK_FD`, `_asks.py`), from any thread at any time,
as it asks for custom metrics and model loading.

A socket of their own (`READY_FD`) carries readiness checks, so that one runs while a batch
executes: the parent sends one byte, a thread of the worker calls the model's `is_ready()` and
answers b"1" (ready) or b"0".
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import time
import types
from pathlib import Path

if __package__ in (None, ""):
    # Run by path: this directory's modules as a package of their own (its `__init__`, Convoy's,
    # never runs), so that their relative imports resolve. `_pickling.py` knows its name.
    __package__ = "convoy_python"
    sys.modules[__package__] = types.ModuleType(__package__)
    sys.modules[__package__].__path__ = [str(Path(__file__).resolve().parent)]

from ._asks import Asks
from ._contract import UTILS_MODULE, ContractError, model_log
from ._model_loading import auto_complete, initialize_model, load_utils, model_class
from ._model_server import ModelServer
from ._ring import Ring
from ._worker_channel import WorkerChannel

_PARENT_CHECK_S = 1.0  # how often an orphaned worker notices that the server is gone


def _setup_logging(model: str, instance: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    label = f"python model '{model}' instance '{instance}'".replace("%", "%%")
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s %(levelname).1s {label} %(filename)s:%(lineno)d] %(message)s"
        )
    )
    logger = model_log()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # log_verbose lines stay quiet, as in Triton by default
    logger.propagate = False


def _watch_parent(parent_pid: int) -> None:
    """Exit when the server dies, even while model code hangs and nobody reads the socket."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, name="convoy-parent-watch", daemon=True).start()


def _serve_readiness(sock: socket.socket, server: ModelServer) -> None:
    """On its own thread: answer each readiness request (one byte) with b"1" (ready) or b"0",
    until the server closes the socket."""
    while True:
        try:
            if not sock.recv(1):
                return
            sock.sendall(b"1" if server.ready() else b"0")
        except OSError:
            return


def _behind_the_loop() -> None:
    """This process under SCHED_BATCH: its threads so far (NumPy's BLAS pool starts as it is
    imported), and by inheritance those it starts, so that their wake-ups never preempt the
    server's event loop (the server's `server.contract.scheduling` says why, and when not)."""
    if os.environ.get("CONVOY_LOOP_FIRST", "1").strip() == "0" or not hasattr(os, "SCHED_BATCH"):
        return
    try:
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            return  # started under a policy of the environment's choosing
        for thread in os.listdir("/proc/self/task"):
            os.sched_setscheduler(int(thread), os.SCHED_BATCH, os.sched_param(0))
    except OSError:
        return


def main(argv: list[str]) -> int:
    # Run as a script, Python put this directory first on sys.path; model.py must not see it.
    own_directory = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != own_directory]
    _behind_the_loop()
    incoming, outgoing = (Ring(fd, os.fstat(fd).st_size) for fd in map(int, argv[2:4]))
    channel = WorkerChannel(socket.socket(fileno=int(argv[1])), incoming, outgoing)
    readiness = socket.socket(fileno=int(argv[4]))
    asks = Asks(socket.socket(fileno=int(argv[5])))
    _watch_parent(os.getppid())
    kind, spec = channel.receive()
    _setup_logging(spec["model_name"], spec["instance_name"])
    utils = load_utils(spec.get("shared_dir"))
    try:
        if kind == "auto_complete":
            channel.send(("completed", auto_complete(spec, utils)))
            return 0
        utils._install_server_ask(asks.server)  # the server answers from initialize on
        model = initialize_model(spec, model_class(spec))
    except ContractError as exc:
        channel.send(("failed", str(exc)))
        return 1
    server = ModelServer(channel, sys.modules[UTILS_MODULE], model, spec, asks=asks)
    if server.checks_readiness:
        threading.Thread(
            target=_serve_readiness, args=(readiness, server), name="convoy-readiness", daemon=True
        ).start()
    # What initialize loaded lives as long as the worker: leave it out of the garbage
    # collector's full passes, which would otherwise walk the model's objects again and again.
    gc.collect()
    gc.freeze()
    channel.send(("ready", server.checks_readiness))
    server.serve()
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv)
    except (OSError, EOFError):  # the server went away mid-message
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter shutdown: threads a model left running must not keep the worker alive.
    os._exit(code)
