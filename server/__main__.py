"""`python -m server ...` is the `convoy` command; `python -m server tritonserver ...` is the
`tritonserver` command; `python -m server frontend ...` is one of the front-end worker processes,
which loads only the front end. The `convoy` and `tritonserver` console commands start here too.

Before the command imports the server (and with it ONNX Runtime), the environment that must
precede those imports is set: ONNX Runtime's telemetry off (`server.contract.framework_telemetry`).
"""

import os
import sys
from collections.abc import Sequence

from server.contract.framework_telemetry import quiet_framework_telemetry


def convoy() -> int:
    """`convoy ...` (its arguments in sys.argv)."""
    quiet_framework_telemetry(os.environ)
    from server.cli import main  # imports ONNX Runtime: after the environment is set

    return main()


def tritonserver(argv: Sequence[str] | None = None) -> int:
    """`tritonserver ...` (None: its arguments in sys.argv)."""
    quiet_framework_telemetry(os.environ)
    from server.cli import tritonserver as run  # as `convoy`: after the environment

    return run(argv)


def _command(argv: Sequence[str]) -> int:
    if argv[:1] == ["frontend"]:
        from server.workers.process import main as worker_main

        return worker_main(argv[1:])
    if argv[:1] == ["tritonserver"]:
        return tritonserver(argv[1:])
    return convoy()


if __name__ == "__main__":
    sys.exit(_command(sys.argv[1:]))
