"""`ServerSettings`: everything the command line decides, as one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from server.contract.idle_poll import DEFAULT_WINDOW_US
from server.contract.logs import LogState
from server.contract.settings import GrpcOptions, RestrictedProtocol, TraceSettings
from server.core.repository import DEFAULT_BACKEND_DIRECTORY, AutoComplete

# A batch of 32 FP32 images of 3x224x224 is 19 MiB; leave room for larger inputs and outputs.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Room for the tensors of the requests one worker has in flight (inputs, and outputs apart); a
# request that finds its arena full sends its bytes in its message instead.
DEFAULT_ARENA_BYTES = 256 * 1024 * 1024


class ModelControlMode(Enum):
    """Triton's model control modes."""

    NONE = "none"  # load everything at start; no changes afterwards
    POLL = "poll"  # load everything, then apply repository changes every poll interval
    EXPLICIT = "explicit"  # load what --load-model names; then only through the API


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """How one Convoy process serves; ports of 0 pick a free port."""

    model_repositories: tuple[str, ...]  # local directories, or s3:// gs:// as:// locations
    grpc_address: str = "127.0.0.1"
    http_address: str = "127.0.0.1"
    metrics_address: str = "127.0.0.1"
    grpc_port: int = 8001
    http_port: int = 8000
    allow_http: bool = True  # serve Triton's HTTP/REST v2 beside gRPC
    metrics_port: int = 8002
    allow_metrics: bool = True
    strict_readiness: bool = True  # ready only when every model is ready, as Triton
    exit_timeout_s: float = 30.0  # bound on waiting for in-flight requests at shutdown
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # gRPC message limit
    model_load_threads: int = 4  # models loaded in parallel at start
    model_control_mode: ModelControlMode = ModelControlMode.NONE
    repository_poll_s: float = 15.0  # poll mode: seconds between scans
    load_models: tuple[str, ...] = ()  # explicit mode: loaded at start ("*": every model)
    restricted: tuple[RestrictedProtocol, ...] = field(default=())  # gRPC
    http_restricted: tuple[RestrictedProtocol, ...] = field(default=())
    allow_cpu_metrics: bool = True  # nv_cpu_utilization, nv_cpu_memory_*_bytes
    allow_gpu_metrics: bool = True  # nv_gpu_* through NVML, where present
    counter_latencies: bool = True  # Triton's *_duration_us counters (--metrics-config)
    histogram_metrics: bool = True  # Convoy's batch-size and latency histograms (--metrics-config)
    # Triton's nv_inference_*_histogram_* families: only when histogram_latencies=true is given.
    latency_histograms: bool = False
    trace: TraceSettings = field(default_factory=TraceSettings)
    memory_budget_bytes: int | None = None  # None: no budget
    evict_lru: bool = False  # make room under the budget by unloading idle models
    lazy_load_timeout_s: float | None = None  # evicted models load on demand, within this
    keep_alive_s: float = 0.0  # explicit mode: unload a model idle this long (0: never)
    cold_start_timeout_s: float = 30.0  # how long a request waits for a keep-alive reload
    auto_complete: AutoComplete = field(default_factory=AutoComplete)  # what files may fill in
    exit_on_error: bool = False  # stop at start when a model fails to load (Triton: true)
    log: LogState = field(default_factory=LogState)  # --log-* flags, changeable at run time
    frontend_workers: int = 0  # front-end worker processes; 0: the front ends run in this one
    frontend_worker_timeout_s: float = 10.0  # a worker silent this long is killed
    idle_poll_us: int = DEFAULT_WINDOW_US  # the core's loop polls this long with nothing in flight
    worker_arena_bytes: int = DEFAULT_ARENA_BYTES  # each worker's input and output arenas
    cache_config: tuple[str, ...] = ()  # raw --cache-config values (server.core.cache parses)
    rate_limit: str = "off"  # --rate-limit: off, or execution_count (the rate limiter on)
    rate_limit_resources: tuple[str, ...] = ()  # raw --rate-limit-resource NAME:COUNT[:DEVICE]
    server_id: str = "convoy"  # the name server metadata reports (Triton's --id)
    allow_grpc: bool = True
    grpc: GrpcOptions = field(default_factory=GrpcOptions)  # keepalive, connection age, TLS
    reuse_grpc_port: bool = False  # SO_REUSEPORT: another server may share the port
    reuse_http_port: bool = False
    http_max_input_bytes: int = 1 << 26  # largest HTTP body, after decompression too
    grpc_forward_pattern: str | None = None  # metadata forwarded as request parameters
    http_forward_pattern: str | None = None  # headers forwarded as request parameters
    fair_share_header: str | None = None  # --fair-share-header: a request's fair-share class
    allow_client_shm: bool = True  # clients may register shared memory regions
    model_load_retries: int = 0  # a failed load is tried again this many times
    model_config_name: str | None = None  # configs/<name>.pbtxt instead of config.pbtxt
    backend_directory: str = DEFAULT_BACKEND_DIRECTORY  # Python-based backends' model.py
    metrics_interval_ms: int = 2000  # CPU and GPU samples are reused within this period
    summary_latencies: bool = False  # Triton's nv_inference_*_summary_us families
    summary_quantiles: tuple[tuple[float, float], ...] = ()  # (quantile, error); (): Triton's


def auto_workers(cores: int) -> int:
    """`--frontend-workers auto`: on two cores or fewer the front ends stay in the core process
    (measured on 2 cores: workers gained unary gRPC on a tiny model 1.3x but cost a compute-bound
    model up to a quarter, since they take the cores its sessions use); above that, half the
    cores, at most four, leaving the rest to the core process and the models' threads."""
    return 0 if cores <= 2 else min(cores // 2, 4)
