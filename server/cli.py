"""`convoy serve ...`: command-line flags onto `ServerSettings`, then run until a signal."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

import uvloop

from backends import usable_cores
from server.app import App, convoy_version
from server.contract.errors import ServerError
from server.contract.logs import LogControl, LogState
from server.contract.settings import RestrictedProtocol, TraceSettings
from server.core.repository import DEFAULT_MAX_BATCH_SIZE, AutoComplete, auto_limit_bytes
from server.frontend.grpc import RESTRICTABLE_GROUPS
from server.settings import (
    DEFAULT_MAX_MESSAGE_BYTES,
    ModelControlMode,
    ServerSettings,
    auto_workers,
)
from server.tools import TOOL_COMMANDS, run_tool

_log = logging.getLogger("convoy")


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _metrics_config(text: str) -> tuple[str, bool]:
    key, _, value = text.partition("=")
    if key not in ("counter_latencies", "histogram_latencies"):
        raise argparse.ArgumentTypeError(
            f"expected counter_latencies=BOOL or histogram_latencies=BOOL, got '{text}'"
        )
    return key, _bool(value)


def _budget(text: str) -> int:
    if text == "auto":
        return auto_limit_bytes()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of bytes or auto, got '{text}'"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the memory budget must be positive, got {value}")
    return value


def _restricted(text: str) -> RestrictedProtocol:
    # Triton's form: "<group>[,<group>...]:<key>=<value>" ("model-repository:admin-key=secret").
    groups, _, header = text.partition(":")
    key, _, value = header.partition("=")
    unknown = set(groups.split(",")) - RESTRICTABLE_GROUPS
    if not groups or not key or not value or unknown:
        raise argparse.ArgumentTypeError(
            f"expected GROUPS:KEY=VALUE with groups among {sorted(RESTRICTABLE_GROUPS)}, "
            f"got '{text}'"
        )
    return RestrictedProtocol(frozenset(groups.split(",")), key.strip().lower(), value)


def _workers(text: str) -> int:
    if text == "auto":
        return auto_workers(usable_cores())
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of workers or auto, got '{text}'")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convoy", description="Serve a Triton-style model repository over Triton's protocol."
    )
    parser.add_argument("--version", action="version", version=f"convoy {convoy_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a model repository")
    serve.add_argument(
        "--model-repository",
        required=True,
        action="append",
        metavar="DIR|URL",
        help="a model repository: a directory, or s3://, gs:// or as:// (cloud storage); repeat "
        "for several (model names must be unique across them)",
    )
    serve.add_argument(
        "--model-control-mode",
        choices=[mode.value for mode in ModelControlMode],
        default=ModelControlMode.NONE.value,
        help="none: load all at start; poll: also apply repository changes; explicit: load "
        "through the API only (default none)",
    )
    serve.add_argument(
        "--repository-poll-secs", type=float, default=15.0, help="poll mode interval (default 15)"
    )
    serve.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="explicit mode: load this model at start (repeatable; * loads all)",
    )
    serve.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[opentelemetry,]KEY=VALUE",
        help="Triton's trace settings: mode=opentelemetry, level=OFF|TIMESTAMPS, rate=N, "
        "count=N, opentelemetry,url=ENDPOINT, opentelemetry,resource=K=V; the OTLP exporter "
        "also reads the standard OTEL_EXPORTER_OTLP_* variables",
    )
    serve.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,KEY=VALUE",
        help="the response cache (repeatable): local,size=BYTES, or redis,host=H with "
        "redis,port=P (and user, password, db, connect_timeout, socket_timeout in ms)",
    )
    serve.add_argument(
        "--rate-limit",
        choices=["off", "execution_count"],
        default="off",
        help="execution_count: instances run only when their instance group's rate_limiter "
        "resources are free, lower priority values first (default off)",
    )
    serve.add_argument(
        "--rate-limit-resource",
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="copies of a rate-limiter resource (repeatable; default: the most any instance asks)",
    )
    serve.add_argument(
        "--memory-budget",
        type=_budget,
        default=None,
        metavar="BYTES|auto",
        help="bytes loaded models may take (auto: half the RAM); loads past it are refused",
    )
    serve.add_argument(
        "--model-eviction",
        choices=["none", "lru"],
        default="none",
        help="lru: unload least recently used idle models to make room under the budget",
    )
    serve.add_argument(
        "--lazy-load",
        action="store_true",
        help="a request for an evicted model loads it again and waits for it",
    )
    serve.add_argument(
        "--lazy-load-timeout-secs",
        type=float,
        default=30.0,
        help="how long such a request waits (default 30)",
    )
    serve.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        type=_restricted,
        metavar="GROUPS:KEY=VALUE",
        help="RPC groups (e.g. model-repository) that need the header KEY with VALUE",
    )
    serve.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        type=_restricted,
        metavar="GROUPS:KEY=VALUE",
        help="HTTP endpoint groups (the same as gRPC's) that need the header KEY with VALUE",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--grpc-port", type=int, default=8001, help="0 picks a free port")
    serve.add_argument(
        "--frontend-workers",
        type=_workers,
        default=0,
        metavar="N|auto",
        help="front-end worker processes serving gRPC and HTTP on the same ports beside the "
        "core process (which keeps models, batching and statistics); 0 serves them in the core "
        "process; auto chooses from the cores (default 0)",
    )
    serve.add_argument("--http-port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--allow-http",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="serve Triton's HTTP/REST v2 protocol beside gRPC (default true)",
    )
    serve.add_argument("--metrics-port", type=int, default=8002, help="0 picks a free port")
    serve.add_argument("--allow-metrics", type=_bool, default=True, metavar="BOOL")
    serve.add_argument(
        "--allow-cpu-metrics",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="export nv_cpu_utilization and nv_cpu_memory_*_bytes (default true)",
    )
    serve.add_argument(
        "--allow-gpu-metrics",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="export nv_gpu_* through NVML where a GPU and nvidia-ml-py are present",
    )
    serve.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        type=_metrics_config,
        metavar="KEY=BOOL",
        help="counter_latencies (Triton's *_duration_us counters) or histogram_latencies "
        "(Convoy's batch-size and latency histograms); both default true",
    )
    serve.add_argument(
        "--strict-readiness",
        type=_bool,
        default=True,
        metavar="BOOL",
        help="ready only when every model is ready (default true)",
    )
    serve.add_argument(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="how long shutdown waits for in-flight requests (default 30)",
    )
    serve.add_argument(
        "--grpc-max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        help=f"largest gRPC message received or sent (default {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    serve.add_argument(
        "--model-load-thread-count", type=int, default=4, help="models loaded in parallel"
    )
    serve.add_argument(
        "--disable-auto-complete-config",
        action="store_true",
        help="configs must declare their tensors and max_batch_size; files fill in nothing",
    )
    serve.add_argument(
        "--strict-model-config",
        type=_bool,
        metavar="BOOL",
        help="Triton's older spelling: true is --disable-auto-complete-config",
    )
    serve.add_argument(
        "--backend-config",
        type=_backend_config,
        action="append",
        default=[],
        metavar="[BACKEND,]KEY=VALUE",
        help="default-max-batch-size=N (auto-complete's, default 4); other keys are ignored",
    )
    serve.add_argument("--log-verbose", type=int, default=0, metavar="N", help="0: info, 1+: debug")
    for level in ("info", "warning", "error"):
        serve.add_argument(
            f"--log-{level}", type=_bool, default=True, metavar="BOOL", help=f"log {level} lines"
        )
    serve.add_argument(
        "--log-format", choices=["default", "ISO8601"], default="default", help="timestamps"
    )
    serve.add_argument(
        "--exit-on-error",
        type=_bool,
        default=False,
        metavar="BOOL",
        help="stop at start when a model fails to load (default false: serve what loads)",
    )
    return parser


def settings_from(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        model_repositories=tuple(args.model_repository),
        host=args.host,
        grpc_port=args.grpc_port,
        http_port=args.http_port,
        allow_http=args.allow_http,
        metrics_port=args.metrics_port,
        allow_metrics=args.allow_metrics,
        strict_readiness=args.strict_readiness,
        exit_timeout_s=args.exit_timeout_secs,
        max_message_bytes=args.grpc_max_message_bytes,
        model_load_threads=args.model_load_thread_count,
        model_control_mode=ModelControlMode(args.model_control_mode),
        repository_poll_s=args.repository_poll_secs,
        load_models=tuple(args.load_model),
        restricted=tuple(args.grpc_restricted_protocol),
        http_restricted=tuple(args.http_restricted_api),
        allow_cpu_metrics=args.allow_cpu_metrics,
        allow_gpu_metrics=args.allow_gpu_metrics,
        counter_latencies=dict(args.metrics_config).get("counter_latencies", True),
        histogram_metrics=dict(args.metrics_config).get("histogram_latencies", True),
        trace=TraceSettings.parse(args.trace_config, os.environ),
        memory_budget_bytes=args.memory_budget,
        evict_lru=args.model_eviction == "lru",
        lazy_load_timeout_s=args.lazy_load_timeout_secs if args.lazy_load else None,
        auto_complete=_auto_complete(args),
        exit_on_error=args.exit_on_error,
        frontend_workers=args.frontend_workers,
        cache_config=tuple(args.cache_config),
        rate_limit=args.rate_limit,
        rate_limit_resources=tuple(args.rate_limit_resource),
        log=LogState(
            log_info=args.log_info,
            log_warning=args.log_warning,
            log_error=args.log_error,
            log_verbose_level=args.log_verbose,
            log_format=args.log_format,
        ),
    )


def _backend_config(value: str) -> tuple[str, str]:
    """`[backend,]key=value` as (key, value); the backend does not matter to Convoy."""
    setting = value.rpartition(",")[2]
    key, _, raw = setting.partition("=")
    if not key or not raw:
        raise argparse.ArgumentTypeError(f"'{value}': expected [BACKEND,]KEY=VALUE")
    return key, raw


def _auto_complete(args: argparse.Namespace) -> AutoComplete:
    settings = dict(args.backend_config)
    for key in sorted(set(settings) - {"default-max-batch-size"}):
        _log.warning("--backend-config %s is not used by Convoy; ignored", key)
    raw = settings.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
    if not raw.isdigit():
        raise SystemExit(f"--backend-config default-max-batch-size={raw}: expected an integer")
    disabled = args.disable_auto_complete_config or args.strict_model_config is True
    return AutoComplete(enabled=not disabled, default_max_batch_size=int(raw))


async def serve(settings: ServerSettings, logs: LogControl | None = None) -> None:
    """Run until SIGTERM or SIGINT, then stop gracefully."""
    app = App(settings, logs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await app.start()
    await stop.wait()
    _log.info("signal received: draining")
    await app.stop()


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words and words[0] in TOOL_COMMANDS:  # `convoy doctor ...`, `convoy profile ...`
        return run_tool(words)
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from(args)
    except ServerError as exc:
        print(f"convoy: {exc}", file=sys.stderr)
        return 2
    logs = LogControl(settings.log)
    try:
        uvloop.run(serve(settings, logs))
    except (OSError, ValueError, ServerError) as exc:
        _log.error("cannot serve: %s", exc)
        return 1
    return 0
