"""ONNX Runtime's usage telemetry, off in Convoy's processes unless the environment asks for it.

ONNX Runtime's official wheels (1.29 and later) collect usage events on Linux and send them to
Microsoft over HTTPS: each process's executable path and operating system, a persistent device
identifier, session creations, model loads, periodic run counts and errors. Until they are sent they
are kept in an SQLite file under the user's home directory
(`~/.cache/Microsoft/DeveloperTools/.onnxruntime/`), and an uploader tries to reach the collector.
ONNX Runtime collected nothing on Linux before 1.29, and a server in a private network has no
business calling out, so Convoy turns it off the way ONNX Runtime documents: the variable
`ORT_DISABLE_TELEMETRY=1`, read once, when ONNX Runtime is first imported. The command's entry
(`server.__main__`) sets it before anything imports ONNX Runtime, and the processes the server
starts (Python models' workers) inherit it.

A variable the environment already sets is left as it is: `ORT_DISABLE_TELEMETRY=0` keeps ONNX
Runtime's default. Measured on the 2-core machine, the telemetry cost no time per run (mlp, a batch
of 8, one thread: 16.6-17.0 us a run either way).
"""

from __future__ import annotations

from collections.abc import MutableMapping

ORT_DISABLE_TELEMETRY = "ORT_DISABLE_TELEMETRY"


def quiet_framework_telemetry(environ: MutableMapping[str, str]) -> bool:
    """Turn ONNX Runtime's telemetry off in `environ` (this process's environment, which the
    processes it starts inherit) unless it names a choice of its own; True when it set it."""
    if ORT_DISABLE_TELEMETRY in environ:
        return False
    environ[ORT_DISABLE_TELEMETRY] = "1"
    return True
