"""A parsed command line onto `ServerSettings`: addresses resolved (own option, then --host, then
the command's default), TLS and keepalive gathered, the deprecated spellings folded into their
successors, and Triton's checks that need several options at once."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Any

from server.contract.logs import LogState
from server.contract.numbers import is_digits
from server.contract.settings import GrpcOptions, GrpcTls, TraceSettings
from server.core.repository import DEFAULT_MAX_BATCH_SIZE, AutoComplete
from server.options._endpoints import ANY, LOOPBACK
from server.options._option import Profile
from server.options._parser import OptionError, Parsed
from server.options._values import metrics_config
from server.settings import ModelControlMode, ServerSettings


def settings_from(
    parsed: Parsed, environment: Mapping[str, str]
) -> tuple[ServerSettings, tuple[str, ...]]:
    """The settings a command line asks for, and the notes to log once logging is set up."""
    values: Mapping[str, Any] = parsed.values
    notes = list(parsed.notes)
    if not values["model_repository"]:
        raise OptionError("--model-repository (or --model-store) is required")
    grpc_address, http_address, metrics_address = _addresses(parsed)
    try:
        metrics = metrics_config(values["metrics_config"])
    except argparse.ArgumentTypeError as exc:
        raise OptionError(str(exc)) from None
    settings = ServerSettings(
        model_repositories=values["model_repository"],
        grpc_address=grpc_address,
        http_address=http_address,
        metrics_address=metrics_address,
        grpc_port=values["grpc_port"],
        http_port=values["http_port"],
        allow_http=values["allow_http"],
        metrics_port=values["metrics_port"],
        allow_metrics=values["allow_metrics"],
        strict_readiness=values["strict_readiness"],
        exit_timeout_s=values["exit_timeout_secs"],
        max_message_bytes=values["grpc_max_message_bytes"],
        model_load_threads=max(1, values["model_load_thread_count"]),
        model_control_mode=ModelControlMode(values["model_control_mode"]),
        repository_poll_s=values["repository_poll_secs"],
        load_models=values["load_model"],
        restricted=values["grpc_restricted_protocol"],
        http_restricted=values["http_restricted_api"],
        allow_cpu_metrics=values["allow_cpu_metrics"],
        allow_gpu_metrics=values["allow_gpu_metrics"],
        counter_latencies=bool(metrics.get("counter_latencies", True)),
        histogram_metrics=bool(metrics.get("histogram_latencies", True)),
        latency_histograms=metrics.get("histogram_latencies") is True,
        summary_latencies=bool(metrics.get("summary_latencies", False)),
        summary_quantiles=metrics.get("summary_quantiles", ()),  # type: ignore[arg-type]
        trace=TraceSettings.parse(_trace_entries(values), environment),
        memory_budget_bytes=values["memory_budget"],
        evict_lru=values["model_eviction"] == "lru",
        lazy_load_timeout_s=values["lazy_load_timeout_secs"] if values["lazy_load"] else None,
        keep_alive_s=_keep_alive(values),
        cold_start_timeout_s=values["lazy_load_timeout_secs"],
        fair_share_header=values["fair_share_header"] or None,
        auto_complete=_auto_complete(values, notes),
        exit_on_error=values["exit_on_error"],
        frontend_workers=values["frontend_workers"],
        frontend_worker_timeout_s=values["frontend_worker_timeout_secs"],
        idle_poll_us=values["idle_poll_us"],
        log=LogState(
            log_info=values["log_info"],
            log_warning=values["log_warning"],
            log_error=values["log_error"],
            log_verbose_level=values["log_verbose"],
            log_format=values["log_format"],
            log_file=values["log_file"] or "",
        ),
        server_id=values["id"],
        allow_grpc=values["allow_grpc"],
        grpc=_grpc_options(values),
        reuse_grpc_port=values["reuse_grpc_port"],
        reuse_http_port=values["reuse_http_port"],
        http_max_input_bytes=values["http_max_input_size"],
        grpc_forward_pattern=_pattern("grpc-header-forward-pattern", values),
        http_forward_pattern=_pattern("http-header-forward-pattern", values),
        allow_client_shm=values["allow_client_shm"],
        model_load_retries=max(0, values["model_load_retry_count"]),
        model_config_name=_config_name(values["model_config_name"]),
        backend_directory=values["backend_directory"],
        metrics_interval_ms=values["metrics_interval_ms"],
        cache_config=_cache_config(values),
        rate_limit=values["rate_limit"],
        rate_limit_resources=tuple(values["rate_limit_resource"]),
    )
    _check_ports(settings)
    return settings, tuple(notes)


def _keep_alive(values: Mapping[str, Any]) -> float:
    keep_alive_s = float(values["model_keep_alive"])
    if keep_alive_s > 0 and values["model_control_mode"] != "explicit":
        raise OptionError("--model-keep-alive needs --model-control-mode explicit")
    return keep_alive_s


def _addresses(parsed: Parsed) -> tuple[str, str, str]:
    """gRPC, HTTP and metrics addresses: an address option wins, then --host, then the
    command's default; metrics follow HTTP's address, as Triton's do."""
    default = ANY if parsed.profile is Profile.TRITON else LOOPBACK
    host = parsed["host"] or default

    def address(dest: str) -> str:
        return str(parsed[dest]) if dest in parsed.given else str(host)

    http = address("http_address")
    metrics = str(parsed["metrics_address"]) if "metrics_address" in parsed.given else http
    return address("grpc_address"), http, metrics


def _grpc_options(values: Mapping[str, Any]) -> GrpcOptions:
    mutual = values["grpc_use_ssl_mutual"]
    tls = None
    if values["grpc_use_ssl"] or mutual:
        cert, key, root = (
            values["grpc_server_cert"],
            values["grpc_server_key"],
            values["grpc_root_cert"],
        )
        if not cert or not key:
            raise OptionError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
        if mutual and not root:
            raise OptionError("--grpc-use-ssl-mutual needs --grpc-root-cert")
        tls = GrpcTls(server_cert=cert, server_key=key, root_cert=root or "", mutual=mutual)
    return GrpcOptions(
        keepalive_time_ms=values["grpc_keepalive_time"],
        keepalive_timeout_ms=values["grpc_keepalive_timeout"],
        keepalive_permit_without_calls=values["grpc_keepalive_permit_without_calls"],
        http2_max_pings_without_data=values["grpc_http2_max_pings_without_data"],
        http2_min_recv_ping_interval_without_data_ms=values[
            "grpc_http2_min_recv_ping_interval_without_data"
        ],
        http2_max_ping_strikes=values["grpc_http2_max_ping_strikes"],
        max_connection_age_ms=values["grpc_max_connection_age"],
        max_connection_age_grace_ms=values["grpc_max_connection_age_grace"],
        compression=values["grpc_infer_response_compression_level"],
        tls=tls,
    )


def _pattern(name: str, values: Mapping[str, Any]) -> str | None:
    pattern = values[name.replace("-", "_")]
    if not pattern:
        return None
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(
            f"--{name} '{pattern}' is not a valid regular expression: {exc}"
        ) from None
    return str(pattern)


def _config_name(name: str | None) -> str | None:
    if name is not None and (not name or any(c.isspace() or c in "/\\" for c in name)):
        raise OptionError(
            f"--model-config-name '{name}': the name must not be empty or hold spaces or slashes"
        )
    return name


def _trace_entries(values: Mapping[str, Any]) -> tuple[str, ...]:
    """--trace-config, after the old --trace-level/-rate/-count spellings it replaced."""
    old = [
        f"{key}={values[f'trace_{key}']}"
        for key in ("level", "rate", "count")
        if values[f"trace_{key}"] is not None
    ]
    return (*old, *values["trace_config"])


def _cache_config(values: Mapping[str, Any]) -> tuple[str, ...]:
    old = values["response_cache_byte_size"]
    if old is None:
        return tuple(values["cache_config"])
    if values["cache_config"]:
        raise OptionError(
            "--response-cache-byte-size and --cache-config cannot be used together: use "
            "--cache-config only"
        )
    return (f"local,size={old}",)


def _auto_complete(values: Mapping[str, Any], notes: list[str]) -> AutoComplete:
    settings = dict(values["backend_config"])
    for key in sorted(set(settings) - {"default-max-batch-size"}):
        notes.append(f"--backend-config {key} has no effect in Convoy; ignored")
    raw = settings.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
    if not is_digits(raw):
        raise OptionError(f"--backend-config default-max-batch-size={raw}: expected an integer")
    disabled = values["disable_auto_complete_config"] or values["strict_model_config"] is True
    return AutoComplete(enabled=not disabled, default_max_batch_size=int(raw))


def _check_ports(settings: ServerSettings) -> None:
    """Triton's check: two endpoints on one address and port (0 picks a free one)."""
    endpoints = [
        ("HTTP", settings.http_address, settings.http_port, settings.allow_http),
        ("GRPC", settings.grpc_address, settings.grpc_port, settings.allow_grpc),
        ("metrics", settings.metrics_address, settings.metrics_port, settings.allow_metrics),
    ]
    serving = [(name, address, port) for name, address, port, on in endpoints if on and port]
    for index, (name, address, port) in enumerate(serving):
        for other, other_address, other_port in serving[index + 1 :]:
            if (address, port) == (other_address, other_port):
                raise OptionError(
                    f"The server cannot listen to {name} requests and {other} requests at the "
                    f"same address and port {address}:{port}"
                )
