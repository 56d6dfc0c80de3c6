"""Python backend: Triton model.py files (`class TritonPythonModel`) run unchanged.

Each instance owns one worker process (`_worker.py`, started by `_process.WorkerProcess`), so a
model that crashes, leaks or hangs cannot take the server down or block its event loop; a model
that asks for it (`convoy_in_process`) runs in the server's process instead (`_local.LocalWorker`:
the same `ModelServer`, no IPC, no isolation). The
worker registers Convoy's `pb_utils` as `triton_python_backend_utils`, puts the version directory
on sys.path, imports model.py by path and calls initialize(args) with Triton's args. Batches go
over a socketpair as pickles whose arrays travel out of band; the server unpickles nothing but
plain NumPy arrays. `execute` hands the model the batch's requests as a list (never
concatenated). The event loop sends a batch to its worker and reads the answer without a thread;
the instance's executor thread takes what blocks (restarts, the model's calls to the server,
an in-process model's execute).

The modules, in a request's order: `_instance` (PythonInstance) and `_runner` (a batch's way there
and back), `_replies` (the execute message, and the worker's replies as checked responses),
`_supervisor` (the worker started, watched and replaced), `_process`, `_server_channel` and
`_frames` with `_ring` and `_pickling` (the worker process and its channel), `_worker` (the
worker's process), `_worker_channel`, `_model_server`, `_asker`, `_asks`, `_model_loading`,
`_contract` and `pb_utils` (the worker's side: Triton's API to model.py), `_local` (the same in
the server's process), `_calls` (what the model asks the server while its batch runs).

Deadlines (model parameters, see `PythonSettings`): `convoy_execute_timeout_s` (60 s) bounds
each execute, a decoupled one until every final flag, and finalize(); `convoy_initialize_timeout_s`
(300 s) bounds starting the worker and initialize(). A worker past its execute deadline, or one
that dies (os._exit, a segfault), is killed with everything it started; its batch fails with an
`ExecutionError` and a fresh worker is initialized at once (a thread waits on each worker, so a
death between batches is seen too, and the instance is not `healthy` until its replacement
serves). If that restart fails, each later batch tries again and fails with the reason until one
succeeds.

What a model returns is checked on the server's side: one InferenceResponse per request; a
response's TritonError fails its request alone; outputs must be exactly the declared ones, numeric
ones safely castable to the config's type, BYTES ones bytes or str. Decoupled models
(`model_transaction_policy { decoupled: true }`) stream through `execute_decoupled`. A model's
`InferenceRequest.exec` (business logic scripting) reaches other models through the `ModelCaller`
the server gives the instance; the instance's thread answers it while the batch runs, and a
decoupled `exec` streams the called model's responses to the model, which may cancel it.
"""

from backends.python._calls import ModelCaller, ModelControl
from backends.python._instance import PythonInstance
from backends.python._placement import python_placements
from backends.python._replies import ResponseSend
from backends.python._settings import PythonSettings
from backends.python._shared import SharedArrays

__all__ = [
    "ModelCaller",
    "ModelControl",
    "PythonInstance",
    "PythonSettings",
    "ResponseSend",
    "SharedArrays",
    "python_placements",
]
