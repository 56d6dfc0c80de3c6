"""`ServerSettings`: everything the command line decides, as one frozen value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# A batch of 32 FP32 images of 3x224x224 is 19 MiB; leave room for larger inputs and outputs.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How one Convoy process serves; ports of 0 pick a free port."""

    model_repository: Path
    host: str = "127.0.0.1"
    grpc_port: int = 8001
    metrics_port: int = 8002
    allow_metrics: bool = True
    strict_readiness: bool = True  # ready only when every model is ready, as Triton
    exit_timeout_s: float = 30.0  # bound on waiting for in-flight requests at shutdown
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # gRPC receive and send limit
    model_load_threads: int = 4  # models loaded in parallel at start
    log_verbose: int = 0
