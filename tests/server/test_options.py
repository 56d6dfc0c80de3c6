"""The one command line of `tritonserver` and `convoy serve`: every Triton option, Triton's
spellings, values and defaults, Convoy's safer defaults, and what a refused command line gets."""

from __future__ import annotations

import marshal
import subprocess
import sys
from pathlib import Path

import pytest

from server.app import front_end_settings
from server.cli import build_parser
from server.contract.idle_poll import DEFAULT_WINDOW_US
from server.contract.settings import FrontEndSettings, GrpcOptions, GrpcTls, TraceSettings
from server.frontend.process import server_options
from server.options import (
    OPTIONS,
    OptionError,
    Profile,
    Support,
    complete,
    settings_from,
    triton_parser,
)
from server.settings import ServerSettings
from server.workers import frames, messages

REPO_ROOT = Path(__file__).resolve().parents[2]

# Triton's parser (server:src/command_line_parser.cc): 91 entries, --help and the --model-store
# alias among them.
TRITON_OPTIONS = [
    "help",
    "id",
    "exit-timeout-secs",
    "model-store",
    "model-repository",
    "exit-on-error",
    "disable-auto-complete-config",
    "strict-readiness",
    "model-control-mode",
    "repository-poll-secs",
    "load-model",
    "model-config-name",
    "model-load-thread-count",
    "model-load-retry-count",
    "model-namespacing",
    "enable-peer-access",
    "allow-http",
    "http-address",
    "http-port",
    "reuse-http-port",
    "http-header-forward-pattern",
    "http-thread-count",
    "http-max-input-size",
    "http-restricted-api",
    "allow-grpc",
    "grpc-address",
    "grpc-port",
    "reuse-grpc-port",
    "grpc-header-forward-pattern",
    "grpc-infer-thread-count",
    "grpc-infer-allocation-pool-size",
    "grpc-max-response-pool-size",
    "grpc-use-ssl",
    "grpc-use-ssl-mutual",
    "grpc-server-cert",
    "grpc-server-key",
    "grpc-root-cert",
    "grpc-infer-response-compression-level",
    "grpc-keepalive-time",
    "grpc-keepalive-timeout",
    "grpc-keepalive-permit-without-calls",
    "grpc-http2-max-pings-without-data",
    "grpc-http2-min-recv-ping-interval-without-data",
    "grpc-http2-max-ping-strikes",
    "grpc-max-connection-age",
    "grpc-max-connection-age-grace",
    "grpc-restricted-protocol",
    "log-verbose",
    "log-info",
    "log-warning",
    "log-error",
    "log-format",
    "log-file",
    "allow-sagemaker",
    "sagemaker-port",
    "sagemaker-safe-port-range",
    "sagemaker-thread-count",
    "allow-vertex-ai",
    "vertex-ai-port",
    "vertex-ai-thread-count",
    "vertex-ai-default-model",
    "allow-metrics",
    "allow-gpu-metrics",
    "allow-cpu-metrics",
    "metrics-address",
    "metrics-port",
    "metrics-interval-ms",
    "metrics-config",
    "trace-config",
    "cache-config",
    "cache-directory",
    "rate-limit",
    "rate-limit-resource",
    "pinned-memory-pool-byte-size",
    "cuda-memory-pool-byte-size",
    "cuda-virtual-address-size",
    "min-supported-compute-capability",
    "buffer-manager-thread-count",
    "host-policy",
    "model-load-gpu-limit",
    "allow-client-shm",
    "backend-directory",
    "backend-config",
    "repoagent-directory",
    "strict-model-config",
    "response-cache-byte-size",
    "trace-file",
    "trace-level",
    "trace-rate",
    "trace-count",
    "trace-log-frequency",
]


def triton(*argv: str, environment: dict[str, str] | None = None) -> ServerSettings:
    parsed = triton_parser().parse_triton(argv, environment or {})
    return settings_from(parsed, environment or {})[0]


def convoy(*argv: str) -> ServerSettings:
    args = build_parser().parse_args(["serve", *argv])
    return settings_from(complete(args, Profile.CONVOY, {}), {})[0]


def test_the_table_holds_every_triton_option_and_nothing_else() -> None:
    assert len(TRITON_OPTIONS) == 91
    names = [
        flag.removeprefix("--")
        for option in OPTIONS
        if option.support is not Support.CONVOY
        for flag in option.flags
    ]
    assert sorted(names) == sorted(TRITON_OPTIONS)
    assert len(set(names)) == len(names)


def test_every_no_effect_or_refused_option_says_why() -> None:
    for option in OPTIONS:
        if option.support in (Support.NO_EFFECT, Support.REFUSED):
            assert option.behaviour, option.name


def test_tritonserver_takes_tritons_defaults_and_convoy_serve_its_own() -> None:
    served = triton("--model-repository=/models")
    assert (served.grpc_address, served.http_address, served.metrics_address) == ("0.0.0.0",) * 3
    assert served.exit_on_error is True
    assert served.allow_client_shm is False
    assert served.server_id == "triton"
    assert (served.grpc_port, served.http_port, served.metrics_port) == (8001, 8000, 8002)
    own = convoy("--model-repository", "/models")
    assert (own.grpc_address, own.http_address, own.metrics_address) == ("127.0.0.1",) * 3
    assert own.exit_on_error is False
    assert own.allow_client_shm is True
    assert own.server_id == "convoy"


def test_the_idle_poll_is_on_by_default_under_both_commands_and_zero_turns_it_off() -> None:
    assert convoy("--model-repository=/m").idle_poll_us == DEFAULT_WINDOW_US > 0
    assert triton("--model-repository=/m").idle_poll_us == DEFAULT_WINDOW_US
    assert convoy("--model-repository=/m", "--idle-poll-us", "0").idle_poll_us == 0


def test_both_spellings_of_a_value_and_the_model_store_alias() -> None:
    one = triton("--model-store=s3://bucket/path", "--model-repository", "/local", "--id", "x")
    assert one.model_repositories == ("s3://bucket/path", "/local")  # URLs pass as they are
    assert one.server_id == "x"
    two = triton("--model-store", "gs://b/m", "--grpc-port=9000", "--http-port", "8080")
    assert (two.model_repositories, two.grpc_port, two.http_port) == (("gs://b/m",), 9000, 8080)


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("ON", True), ("1", True), ("False", False), ("off", False), ("0", False)],
)
def test_tritons_booleans(text: str, value: bool) -> None:
    assert triton("--model-store=/m", f"--allow-grpc={text}").allow_grpc is value


@pytest.mark.parametrize(("text", "level"), [("true", 1), ("false", 0), ("0", 0), ("3", 3)])
def test_log_verbose_takes_booleans_as_triton(text: str, level: int) -> None:
    assert triton("--model-store=/m", f"--log-verbose={text}").log.log_verbose_level == level


def test_metrics_follow_the_http_address_and_host_sets_all_three() -> None:
    follows = triton("--model-store=/m", "--http-address=10.0.0.1")
    assert (follows.http_address, follows.metrics_address, follows.grpc_address) == (
        "10.0.0.1",
        "10.0.0.1",
        "0.0.0.0",
    )
    hosted = convoy("--model-repository", "/m", "--host", "0.0.0.0", "--grpc-address", "::1")
    assert (hosted.grpc_address, hosted.http_address, hosted.metrics_address) == (
        "::1",
        "0.0.0.0",
        "0.0.0.0",
    )


def test_seed_command_line_parses_for_both_commands() -> None:
    line = ["--model-repository=/models", "--model-control-mode=poll", "--metrics-interval-ms=2000"]
    for settings in (triton(*line), convoy(*line)):
        assert settings.model_control_mode.value == "poll"
        assert settings.metrics_interval_ms == 2000


def test_tls_keepalive_and_connection_age_reach_the_grpc_options() -> None:
    settings = triton(
        "--model-store=/m",
        "--grpc-use-ssl-mutual=true",
        "--grpc-server-cert=server.pem",
        "--grpc-server-key=server.key",
        "--grpc-root-cert=ca.pem",
        "--grpc-keepalive-time=1000",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-max-connection-age=5000",
        "--grpc-max-connection-age-grace=100",
    )
    assert settings.grpc.tls == GrpcTls("server.pem", "server.key", "ca.pem", mutual=True)
    front = FrontEndSettings(
        "0.0.0.0", "0.0.0.0", 0, 0, True, 1024, False, (), (), TraceSettings(), "0",
        grpc=settings.grpc,
    )  # fmt: skip
    options = dict(server_options(front))
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_connection_age_ms"] == 5000
    assert options["grpc.max_connection_age_grace_ms"] == 100
    assert options["grpc.so_reuseport"] == 0
    # Front-end workers deal connections again after 20 s unless an age is given.
    shared = FrontEndSettings(
        "a", "a", 0, 0, True, 1024, False, (), (), TraceSettings(), "0", reuse_port=True
    )
    assert dict(server_options(shared))["grpc.max_connection_age_ms"] == 20_000
    assert FrontEndSettings.from_plain(front.plain()) == front
    assert GrpcOptions().keepalive_time_ms == 7_200_000  # Triton's defaults


def test_deprecated_spellings_fold_into_their_successors() -> None:
    settings = triton(
        "--model-store=/m",
        "--trace-level=TIMESTAMPS",
        "--trace-rate=5",
        "--response-cache-byte-size=99",
    )
    assert (settings.trace.level, settings.trace.rate) == ("TIMESTAMPS", 5)
    assert settings.cache_config == ("local,size=99",)


def test_summary_metrics_config_and_quantiles() -> None:
    settings = triton(
        "--model-store=/m",
        "--metrics-config=summary_latencies=true",
        "--metrics-config",
        "summary_quantiles=0.5:0.05,0.99:0.001",
    )
    assert settings.summary_latencies is True
    assert settings.summary_quantiles == ((0.5, 0.05), (0.99, 0.001))


def test_no_effect_options_are_noted_once_with_the_reason() -> None:
    parsed = triton_parser().parse_triton(
        ["--model-store=/m", "--pinned-memory-pool-byte-size=1", "--cache-directory", "/x"], {}
    )
    _, notes = settings_from(parsed, {})
    assert len(notes) == 2
    assert notes[0].startswith("--pinned-memory-pool-byte-size has no effect in Convoy: ")


@pytest.mark.parametrize(
    ("argv", "environment", "message"),
    [
        (["--allow-sagemaker=true"], {}, "--allow-sagemaker=true is not supported"),
        (["--model-namespacing=true"], {}, "--model-namespacing=true is not supported"),
        ([], {"AIP_MODE": "PREDICTION"}, "AIP_MODE=PREDICTION (Vertex AI) is not supported"),
        (["--grpc-use-ssl=1"], {}, "--grpc-use-ssl needs --grpc-server-cert"),
        (
            ["--http-port=9000", "--grpc-port=9000"],
            {},
            "The server cannot listen to HTTP requests and GRPC requests at the same address "
            "and port 0.0.0.0:9000",
        ),
        (["--grpc-header-forward-pattern=("], {}, "is not a valid regular expression"),
        # Numbers take ASCII digits only (int() alone reads Arabic-Indic digits, underscores).
        (["--grpc-port=\u0661"], {}, "Invalid option value. Got \u0661"),
        (["--grpc-port=8_001"], {}, "Invalid option value. Got 8_001"),
        (["--backend-config=default-max-batch-size=\u0664"], {}, "expected an integer"),
        (["--idle-poll-us=-5"], {}, "expected a number of microseconds >= 0, got -5"),
    ],
)
def test_refused_command_lines_say_why(
    argv: list[str], environment: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = triton_parser()
    try:
        parsed = parser.parse_triton(["--model-store=/m", *argv], environment)
        settings_from(parsed, environment)
    except OptionError as exc:
        assert message in str(exc)
        return
    except SystemExit as exited:
        assert exited.code == 1
        assert message in capsys.readouterr().err
        return
    pytest.fail("accepted")


def test_convoy_serve_keeps_the_allowed_defaults_of_refused_options() -> None:
    assert convoy("--model-repository=/m", "--allow-sagemaker=false").allow_grpc is True


@pytest.mark.parametrize(
    ("argv", "first_line"),
    [
        (
            ["--model-store=/m", "--no-such-option=1"],
            "tritonserver: unrecognized option '--no-such-option=1'",
        ),
        (["--model-store=/m", "stray"], "Unexpected argument: stray"),
        (["--model-store=/m", "--allow-http=maybe"], 'Bad option: "--allow-http".'),
    ],
)
def test_tritonserver_refuses_as_triton_does(argv: list[str], first_line: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server", "tritonserver", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == first_line
    assert "Usage: tritonserver [options]" in lines


def test_every_front_end_setting_reaches_a_worker_whole() -> None:
    """The settings a worker's front ends run with cross the boundary in its WELCOME message, as
    plain values: every flag that shapes a front end must come back equal."""
    argv = [
        "--model-repository=/m",
        "--id=edge-7",
        "--grpc-address=::1",
        "--http-port=8100",
        "--grpc-header-forward-pattern=^x-fwd-",
        "--http-header-forward-pattern=^x-fwd-",
        "--http-max-input-size=4096",
        "--allow-client-shm=false",
        "--grpc-infer-response-compression-level=high",
        "--grpc-restricted-protocol=model-repository:admin-key=secret",
        "--http-restricted-api=shared-memory:admin-key=secret",
        "--grpc-use-ssl=true",
        "--grpc-server-cert=server.pem",
        "--grpc-server-key=server.key",
        "--grpc-keepalive-time=1000",
        "--trace-config=mode=opentelemetry",
        "--trace-config=rate=7",
    ]
    front = front_end_settings(triton(*argv))
    frame = frames.encode((messages.WELCOME, front.plain()))
    _, plain = marshal.loads(frame[4:])
    assert FrontEndSettings.from_plain(plain) == front
