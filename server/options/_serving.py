"""Triton's options for the server, its model repositories, model control, logging, tracing and
caches, in the order of Triton's parser; then Convoy's own options."""

from __future__ import annotations

from server.contract.idle_poll import DEFAULT_WINDOW_US
from server.core.repository import DEFAULT_BACKEND_DIRECTORY
from server.options._option import Option, Support
from server.options._values import (
    BOOL,
    FILE,
    INT,
    MICROSECONDS,
    SECONDS,
    SWITCH,
    TEXT,
    Value,
    budget,
    choice,
    setting,
    verbose_level,
    workers,
)
from server.settings import DEFAULT_MAX_MESSAGE_BYTES

SERVED, NO_EFFECT, CONVOY = Support.SERVED, Support.NO_EFFECT, Support.CONVOY
_TRACE_FILE = "Convoy traces through OpenTelemetry only (see Tracing)"

SERVER = (
    # argparse's own --help (and -h) prints the usage; the entry is for the docs' option table.
    Option("help", SWITCH, "print the usage", SERVED, "-"),
    Option(
        "id",
        TEXT,
        "server identifier: the name server metadata reports",
        SERVED,
        "triton",
        "triton",
        "convoy",
    ),
    Option(
        "exit-timeout-secs",
        SECONDS,
        "how long shutdown waits for requests in flight and then the models' unloads (at least "
        "1 s for those)",
        SERVED,
        "30",
        30.0,
    ),
)

REPOSITORY = (
    Option(
        "model-repository",
        Value("PATH|URL", str),
        "a model repository (local, s3://, gs://, as://); repeatable",
        SERVED,
        "none",
        aliases=("model-store",),
        repeat=True,
        behaviour="`--model-store` is the same option",
    ),
    Option(
        "exit-on-error",
        BOOL,
        "exit if a model fails to load at start",
        SERVED,
        "true",
        True,
        False,
        "`convoy serve` serves what loads and reports the rest as UNAVAILABLE",
    ),
    Option(
        "disable-auto-complete-config",
        SWITCH,
        "configs must be complete: model files fill in nothing",
        SERVED,
        "off",
        False,
    ),
    Option(
        "strict-readiness",
        BOOL,
        "ready only when every model is ready",
        SERVED,
        "true",
        True,
    ),
    Option(
        "model-control-mode",
        Value("none|poll|explicit", choice("none", "poll", "explicit", fold_case=True)),
        "none: load all at start; poll: also apply repository changes; explicit: the API loads",
        SERVED,
        "none",
        "none",
    ),
    Option(
        "repository-poll-secs",
        SECONDS,
        "poll mode: seconds between scans of the repositories",
        SERVED,
        "15",
        15.0,
    ),
    Option(
        "load-model",
        Value("NAME", str),
        "explicit mode: load this model at start (`*`: all); repeatable",
        SERVED,
        "none",
        repeat=True,
    ),
    Option(
        "model-config-name",
        TEXT,
        "read `configs/<name>.pbtxt` of each model instead of config.pbtxt",
        SERVED,
        "unset",
        behaviour="a model without that file falls back to config.pbtxt",
    ),
    Option(
        "backend-directory",
        FILE,
        "where Python-based backends are: `<directory>/<backend>/model.py`",
        SERVED,
        DEFAULT_BACKEND_DIRECTORY,
        DEFAULT_BACKEND_DIRECTORY,
        behaviour="Convoy's own backends are built in; a backend it does not serve runs as a "
        "Python-based one when its model.py is there",
    ),
    Option("model-load-thread-count", INT, "models loaded in parallel", SERVED, "4", 4),
    Option(
        "model-load-retry-count",
        INT,
        "retries of a load that failed",
        SERVED,
        "0",
        0,
    ),
    Option(
        "model-namespacing",
        BOOL,
        "the same model name may be in several repositories",
        Support.REFUSED,
        "false",
        False,
        behaviour="model names must be unique across repositories",
    ),
    Option(
        "allow-client-shm",
        BOOL,
        "clients may register system and CUDA shared memory regions",
        SERVED,
        "false",
        False,
        True,
        "`convoy serve` allows them (it binds loopback by default)",
    ),
)

LOGGING = (
    Option(
        "log-verbose",
        Value("N", verbose_level),
        "verbose level (true: 1, false: 0)",
        SERVED,
        "0",
        0,
        behaviour="1 or more: debug lines",
    ),
    Option("log-info", BOOL, "log info lines", SERVED, "true", True),
    Option("log-warning", BOOL, "log warning lines", SERVED, "true", True),
    Option("log-error", BOOL, "log error lines", SERVED, "true", True),
    Option(
        "log-format",
        Value("default|ISO8601", choice("default", "ISO8601")),
        "timestamps of log lines",
        SERVED,
        "default",
        "default",
    ),
    Option("log-file", FILE, "write the log to this file (appended)", SERVED, "unset (stderr)"),
)

TRACING = (
    Option(
        "trace-config",
        Value("[MODE,]KEY=VALUE", str),
        "trace mode and settings; repeatable",
        SERVED,
        "mode triton, level OFF, rate 1000, count -1",
        repeat=True,
        behaviour="OpenTelemetry mode only (see Tracing)",
    ),
    Option(
        "trace-file",
        FILE,
        "old: Triton-mode trace file",
        NO_EFFECT,
        "deprecated",
        behaviour=_TRACE_FILE,
    ),
    Option(
        "trace-level",
        Value("LEVEL", str),
        "old spelling of `--trace-config level=`",
        SERVED,
        "deprecated",
    ),
    Option("trace-rate", INT, "old spelling of `--trace-config rate=`", SERVED, "deprecated"),
    Option("trace-count", INT, "old spelling of `--trace-config count=`", SERVED, "deprecated"),
    Option(
        "trace-log-frequency",
        INT,
        "old: Triton-mode trace file flushes",
        NO_EFFECT,
        "deprecated",
        behaviour=_TRACE_FILE,
    ),
)

SCHEDULING = (
    Option(
        "rate-limit",
        Value("off|execution_count", choice("off", "execution_count", fold_case=True)),
        "rate limiter: execution_count runs an instance only when its resources are free",
        SERVED,
        "off",
        "off",
    ),
    Option(
        "rate-limit-resource",
        Value("NAME:COUNT[:DEVICE]", str),
        "the count of a rate limiter resource (per device, or global); repeatable",
        SERVED,
        "none",
        repeat=True,
    ),
)

CACHES = (
    Option(
        "cache-config",
        Value("CACHE,KEY=VALUE", str),
        "the response cache: local,size=BYTES, or redis,host=H with redis,port=P (and user, "
        "password, db, connect_timeout, socket_timeout in ms); repeatable",
        SERVED,
        "cache off",
        repeat=True,
    ),
    Option(
        "response-cache-byte-size",
        INT,
        "old spelling of `--cache-config local,size=N`",
        SERVED,
        "deprecated",
    ),
    Option(
        "backend-config",
        Value("[BACKEND,]KEY=VALUE", setting),
        "backend settings; repeatable",
        SERVED,
        "none",
        repeat=True,
        behaviour="`default-max-batch-size=N` (auto-complete's, default 4) is used; other keys "
        "are logged once and ignored",
    ),
    Option(
        "strict-model-config",
        BOOL,
        "old spelling: true is --disable-auto-complete-config",
        SERVED,
        "false",
    ),
)

CONVOY_OWN = (
    Option(
        "host",
        Value("ADDRESS", str),
        "address for all three endpoints, where their own address option is not given",
        CONVOY,
    ),
    Option(
        "frontend-workers",
        Value("N|auto", workers),
        "gRPC and HTTP from N worker processes beside the core process (see Front-end "
        "workers); 0 serves them in the core process; auto picks from the cores",
        CONVOY,
        default=0,
    ),
    Option(
        "frontend-worker-timeout-secs",
        SECONDS,
        "a front-end worker whose event loop has not answered the core's heartbeat (every "
        "second) for this long is killed and restarted (see Front-end workers)",
        CONVOY,
        default=10.0,
    ),
    Option(
        "idle-poll-us",
        MICROSECONDS,
        "how long the event loop keeps polling instead of sleeping once its last request in "
        "flight is answered: lower latency at low load where an idle CPU halts (see The hot "
        "path); 0 never polls; off on one core and with --frontend-workers",
        CONVOY,
        default=DEFAULT_WINDOW_US,
    ),
    Option(
        "grpc-max-message-bytes",
        INT,
        "largest gRPC message received or sent",
        CONVOY,
        default=DEFAULT_MAX_MESSAGE_BYTES,
    ),
    Option(
        "memory-budget",
        Value("BYTES|auto", budget),
        "bytes loaded models may take (auto: half the GPUs' memory where there are GPUs, else "
        "half the RAM); loads past it are refused",
        CONVOY,
    ),
    Option(
        "model-eviction",
        Value("none|lru", choice("none", "lru")),
        "lru: unload least recently used idle models to make room under the budget",
        CONVOY,
        default="none",
    ),
    Option(
        "lazy-load",
        SWITCH,
        "a request for an evicted model loads it again and waits for it",
        CONVOY,
        default=False,
    ),
    Option(
        "lazy-load-timeout-secs",
        SECONDS,
        "how long such a request waits",
        CONVOY,
        default=30.0,
    ),
    Option(
        "model-keep-alive",
        SECONDS,
        "explicit mode: unload a model idle this long (per model: convoy_keep_alive_s); a "
        "request loads it again, within --lazy-load-timeout-secs; 0 keeps models loaded",
        CONVOY,
        default=0.0,
    ),
    Option(
        "fair-share-header",
        TEXT,
        "the header (gRPC metadata) whose value is a request's client class: a model with "
        "convoy_fair_share takes first the class served least lately",
        CONVOY,
    ),
)
