"""Settings both kinds of process read: which protocol groups need a header, and how requests are
traced (Triton's --trace-config), with the headers that carry a trace context."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from server.contract.errors import ConfigError
from server.contract.numbers import parse_integer

TRACE_HEADERS = ("traceparent", "tracestate")  # W3C trace context in gRPC metadata


@dataclass(frozen=True, slots=True)
class RestrictedProtocol:
    """Protocol groups that need a header with a given value (Triton's
    --grpc-restricted-protocol and --http-restricted-api)."""

    groups: frozenset[str]  # e.g. {"model-repository"}
    header: str  # lower-case gRPC metadata key or HTTP header name
    value: str


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Triton's --trace-config settings (OpenTelemetry mode) and the OTLP exporter's."""

    level: str = "OFF"  # OFF or TIMESTAMPS
    rate: int = 1000  # trace one request in `rate` (0: only requests that carry a context)
    count: int = -1  # how many requests to trace; -1 unlimited
    endpoint: str | None = None  # `url`; None: the exporter reads OTEL_EXPORTER_OTLP_*ENDPOINT
    protocol: str = "http/protobuf"  # or "grpc" (OTEL_EXPORTER_OTLP_*PROTOCOL)
    resource: Mapping[str, str] = field(default_factory=dict)
    bsp: Mapping[str, int] = field(default_factory=dict)  # batch span processor settings

    @property
    def enabled(self) -> bool:
        return self.level != "OFF"

    @classmethod
    def parse(cls, entries: Sequence[str], environment: Mapping[str, str]) -> TraceSettings:
        """From `--trace-config` entries ("rate=1", "opentelemetry,url=...") and OTEL_ vars."""
        values: dict[str, str] = {}
        resource: dict[str, str] = {}
        bsp: dict[str, int] = {}
        for entry in entries:
            section, _, setting = entry.rpartition(",")
            key, _, value = setting.partition("=")
            if section not in ("", "opentelemetry") or not key or not value:
                raise ConfigError(f"--trace-config '{entry}': expected [opentelemetry,]KEY=VALUE")
            if key == "resource":
                name, _, attribute = value.partition("=")
                resource[name] = attribute
            elif key.startswith("bsp_"):
                bsp[key] = _int(entry, value)
            else:
                values[key] = value
        mode = values.pop("mode", "opentelemetry")
        if mode != "opentelemetry":
            raise ConfigError(f"--trace-config mode={mode}: only opentelemetry is supported")
        level = values.pop("level", "OFF").upper()
        if level not in ("OFF", "TIMESTAMPS"):
            raise ConfigError(f"--trace-config level={level}: use OFF or TIMESTAMPS")
        settings = cls(
            level=level,
            rate=_int("rate", values.pop("rate", "1000")),
            count=_int("count", values.pop("count", "-1")),
            endpoint=values.pop("url", None),
            protocol=environment.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or environment.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            resource=resource,
            bsp=bsp,
        )
        if values:
            raise ConfigError(f"--trace-config: unknown setting(s) {sorted(values)}")
        if settings.protocol not in ("grpc", "http/protobuf"):
            raise ConfigError(f"OTLP protocol '{settings.protocol}': use grpc or http/protobuf")
        return settings


def _int(name: str, value: str) -> int:
    number = parse_integer(value)
    if number is None:
        raise ConfigError(f"--trace-config {name}: expected an integer, got '{value}'")
    return number


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS on gRPC (Triton's --grpc-use-ssl*): PEM files the front end reads at start."""

    server_cert: str  # the certificate chain the server presents
    server_key: str  # its private key
    root_cert: str = ""  # the roots client certificates must chain to (mutual mode)
    mutual: bool = False  # refuse clients without a certificate signed by `root_cert`


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Triton's gRPC server arguments: keepalive, connection age, response compression, TLS."""

    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None  # None: connections live on
    max_connection_age_grace_ms: int | None = None  # None: calls in flight finish
    compression: str = "none"  # none, low, medium or high (Triton's levels)
    tls: GrpcTls | None = None  # None: plaintext


@dataclass(frozen=True, slots=True)
class FrontEndSettings:
    """How a front end listens and answers; ports of 0 pick a free port."""

    grpc_address: str
    http_address: str
    grpc_port: int
    http_port: int
    allow_http: bool
    max_message_bytes: int  # gRPC message limit
    model_control: bool  # explicit mode: load and unload are allowed
    restricted: tuple[RestrictedProtocol, ...]  # gRPC
    http_restricted: tuple[RestrictedProtocol, ...]
    trace: TraceSettings
    version: str  # what server metadata reports
    server_name: str = "convoy"  # the name server metadata reports (Triton's --id)
    allow_grpc: bool = True
    grpc: GrpcOptions = field(default_factory=GrpcOptions)
    http_max_input_bytes: int = 1 << 26  # largest HTTP body, after decompression too
    grpc_forward_pattern: str | None = None  # metadata keys forwarded as request parameters
    http_forward_pattern: str | None = None  # header names forwarded as request parameters
    fair_share_header: str | None = None  # its value is a request's fair-share class
    reuse_port: bool = False  # SO_REUSEPORT on both ports: this server's processes share them
    reuse_grpc_port: bool = False  # SO_REUSEPORT on gRPC, as asked (--reuse-grpc-port)
    reuse_http_port: bool = False  # SO_REUSEPORT on HTTP, as asked (--reuse-http-port)

    def plain(self) -> dict[str, Any]:
        """The settings as plain values (for a worker process's channel)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_plain(cls, values: Mapping[str, Any]) -> FrontEndSettings:
        rules = {
            key: tuple(RestrictedProtocol(**rule) for rule in values[key])
            for key in ("restricted", "http_restricted")
        }
        grpc = dict(values["grpc"])
        tls = grpc["tls"]
        grpc["tls"] = None if tls is None else GrpcTls(**tls)
        return cls(
            **{
                **values,
                **rules,
                "trace": TraceSettings(**values["trace"]),
                "grpc": GrpcOptions(**grpc),
            }
        )
