"""Triton's options for the endpoints: HTTP, gRPC (TLS, keepalive), metrics, SageMaker and
Vertex AI, in the order of Triton's parser (`src/command_line_parser.cc`)."""

from __future__ import annotations

from server.options._option import Option, Support
from server.options._values import (
    ADDRESS,
    BOOL,
    FILE,
    INT,
    MILLISECONDS,
    PATTERN,
    TEXT,
    Value,
    choice,
    integer,
    restricted,
    setting,
)

SERVED, NO_EFFECT, REFUSED = Support.SERVED, Support.NO_EFFECT, Support.REFUSED
ANY = "0.0.0.0"
LOOPBACK = "127.0.0.1"
HTTP_DEFAULT_MAX_INPUT_BYTES = 1 << 26  # Triton's HTTP_DEFAULT_MAX_INPUT_SIZE (src/common.h)
_THREADS = "Convoy serves each endpoint from its event loop (--frontend-workers adds processes)"
_GRPC_POOLS = "Convoy keeps no pool of request or response objects"
_SAGEMAKER = "Convoy has no SageMaker endpoint (/ping, /invocations)"
_VERTEX = "Convoy has no Vertex AI endpoint"

HTTP = (
    Option("allow-http", BOOL, "serve the HTTP/REST endpoint", SERVED, "true", True),
    Option(
        "http-address",
        ADDRESS,
        "address the HTTP endpoint binds",
        SERVED,
        ANY,
        ANY,
        LOOPBACK,
        "`--host` sets all three addresses",
    ),
    Option("http-port", INT, "HTTP port; 0 picks a free port", SERVED, "8000", 8000),
    Option(
        "reuse-http-port",
        BOOL,
        "bind the HTTP port with SO_REUSEPORT",
        SERVED,
        "false",
        False,
        behaviour="without it, a port another server holds is refused",
    ),
    Option(
        "http-header-forward-pattern",
        PATTERN,
        "HTTP headers whose name matches are forwarded as string request parameters",
        SERVED,
        "unset",
    ),
    Option("http-thread-count", INT, "HTTP threads", NO_EFFECT, "8", behaviour=_THREADS),
    Option(
        "http-max-input-size",
        INT,
        "largest HTTP request body, also after decompression",
        SERVED,
        str(HTTP_DEFAULT_MAX_INPUT_BYTES),
        HTTP_DEFAULT_MAX_INPUT_BYTES,
        behaviour="a larger body gets 400 and Triton's message",
    ),
    Option(
        "http-restricted-api",
        Value("GROUPS:KEY=VALUE", restricted),
        "the HTTP endpoints of these groups need the header KEY with VALUE",
        SERVED,
        "none",
        repeat=True,
    ),
)

GRPC = (
    Option("allow-grpc", BOOL, "serve the gRPC endpoint", SERVED, "true", True),
    Option("grpc-port", INT, "gRPC port; 0 picks a free port", SERVED, "8001", 8001),
    Option(
        "reuse-grpc-port",
        BOOL,
        "bind the gRPC port with SO_REUSEPORT",
        SERVED,
        "false",
        False,
        behaviour="without it, a port another server holds is refused",
    ),
    Option(
        "grpc-address",
        ADDRESS,
        "address the gRPC endpoint binds",
        SERVED,
        ANY,
        ANY,
        LOOPBACK,
        "`--host` sets all three addresses",
    ),
    Option(
        "grpc-header-forward-pattern",
        PATTERN,
        "gRPC metadata whose key matches is forwarded as string request parameters",
        SERVED,
        "unset",
    ),
    Option(
        "grpc-infer-thread-count", INT, "gRPC inference threads", NO_EFFECT, "2", behaviour=_THREADS
    ),
    Option(
        "grpc-infer-allocation-pool-size",
        INT,
        "request states kept for reuse",
        NO_EFFECT,
        "8",
        behaviour=_GRPC_POOLS,
    ),
    Option(
        "grpc-max-response-pool-size",
        INT,
        "response objects queued at once",
        NO_EFFECT,
        "unbounded",
        behaviour=_GRPC_POOLS,
    ),
    Option("grpc-use-ssl", BOOL, "TLS on gRPC", SERVED, "false", False),
    Option(
        "grpc-use-ssl-mutual",
        BOOL,
        "mutual TLS on gRPC (implies --grpc-use-ssl)",
        SERVED,
        "false",
        False,
        behaviour="clients need a certificate signed by --grpc-root-cert",
    ),
    Option("grpc-server-cert", FILE, "PEM certificate the server presents", SERVED, '""'),
    Option("grpc-server-key", FILE, "PEM key of that certificate", SERVED, '""'),
    Option(
        "grpc-root-cert", FILE, "PEM root certificate client certificates chain to", SERVED, '""'
    ),
    Option(
        "grpc-infer-response-compression-level",
        Value("none|low|medium|high", choice("none", "low", "medium", "high", fold_case=True)),
        "compression of inference responses",
        SERVED,
        "none",
        "none",
        behaviour="any level but none gzips the responses of every RPC",
    ),
    Option(
        "grpc-keepalive-time", MILLISECONDS, "keepalive ping period", SERVED, "7200000", 7200000
    ),
    Option("grpc-keepalive-timeout", MILLISECONDS, "wait for a ping's ack", SERVED, "20000", 20000),
    Option(
        "grpc-keepalive-permit-without-calls",
        BOOL,
        "allow keepalive pings with no call in flight",
        SERVED,
        "false",
        False,
    ),
    Option(
        "grpc-http2-max-pings-without-data",
        INT,
        "pings sent without a data frame",
        SERVED,
        "2",
        2,
    ),
    Option(
        "grpc-http2-min-recv-ping-interval-without-data",
        MILLISECONDS,
        "shortest gap between a client's pings before one counts as a strike",
        SERVED,
        "300000",
        300000,
    ),
    Option(
        "grpc-http2-max-ping-strikes", INT, "bad pings before the connection ends", SERVED, "2", 2
    ),
    Option(
        "grpc-max-connection-age",
        MILLISECONDS,
        "a connection's longest life before GOAWAY",
        SERVED,
        "unset",
        behaviour="unset with --frontend-workers: 20000, so connections are dealt again",
    ),
    Option(
        "grpc-max-connection-age-grace",
        MILLISECONDS,
        "how long calls may finish after that age",
        SERVED,
        "unset",
    ),
    Option(
        "grpc-restricted-protocol",
        Value("GROUPS:KEY=VALUE", restricted),
        "the RPCs of these groups need the metadata KEY with VALUE",
        SERVED,
        "none",
        repeat=True,
    ),
)

METRICS = (
    Option("allow-metrics", BOOL, "serve the metrics endpoint", SERVED, "true", True),
    Option(
        "allow-gpu-metrics",
        BOOL,
        "export GPU metrics",
        SERVED,
        "true",
        True,
        behaviour="through NVML where a GPU and the `gpu` extra's nvidia-ml-py are present",
    ),
    Option("allow-cpu-metrics", BOOL, "export CPU metrics", SERVED, "true", True),
    Option(
        "metrics-address",
        ADDRESS,
        "address the metrics endpoint binds",
        SERVED,
        "= --http-address",
    ),
    Option("metrics-port", INT, "metrics port; 0 picks a free port", SERVED, "8002", 8002),
    Option(
        "metrics-interval-ms",
        MILLISECONDS,
        "refresh period of the CPU and GPU metrics",
        SERVED,
        "2000",
        2000,
        behaviour="scrapes within the period get the same CPU and GPU samples",
    ),
    Option(
        "metrics-config",
        Value("KEY=VALUE", setting),
        "metric groups: counter_latencies, histogram_latencies, summary_latencies, "
        "summary_quantiles",
        SERVED,
        "counters on, histograms and summaries off",
        behaviour="histogram_latencies=true adds Triton's latency histograms "
        "(`nv_inference_first_response_histogram_ms` and the five `*_duration_histogram_us`, "
        "buckets per model from `model_metrics`); =false also drops Convoy's own `convoy_*` "
        "histograms, on otherwise; the summaries are Triton's `nv_inference_*_summary_us`",
        repeat=True,
    ),
)

CLOUD = (
    Option(
        "allow-sagemaker", BOOL, "SageMaker endpoint", REFUSED, "false", False, behaviour=_SAGEMAKER
    ),
    Option("sagemaker-port", INT, "SageMaker port", NO_EFFECT, "8080", behaviour=_SAGEMAKER),
    Option(
        "sagemaker-safe-port-range",
        Value("MIN-MAX", str),
        "ports the other endpoints may use",
        NO_EFFECT,
        "unset",
        behaviour=_SAGEMAKER,
    ),
    Option(
        "sagemaker-thread-count", INT, "SageMaker threads", NO_EFFECT, "8", behaviour=_SAGEMAKER
    ),
    Option(
        "allow-vertex-ai",
        BOOL,
        "Vertex AI endpoint",
        REFUSED,
        "true if AIP_MODE=PREDICTION",
        False,
        behaviour=f"{_VERTEX}; AIP_MODE=PREDICTION is refused too",
    ),
    Option(
        "vertex-ai-port",
        Value("N", integer),
        "Vertex AI port",
        NO_EFFECT,
        "AIP_HTTP_PORT or 8080",
        behaviour=_VERTEX,
    ),
    Option("vertex-ai-thread-count", INT, "Vertex AI threads", NO_EFFECT, "8", behaviour=_VERTEX),
    Option(
        "vertex-ai-default-model",
        TEXT,
        "model of single-model requests",
        NO_EFFECT,
        "unset",
        behaviour=_VERTEX,
    ),
)
