"""TraceSetting and LogSettings as Triton answers them in OpenTelemetry mode."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from e2e_support import REPO_ROOT, StartServer, serve_command, simple_inputs
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models


@pytest.fixture
def client(start_server: StartServer, tmp_path: Path) -> Iterator[grpcclient.InferenceServerClient]:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    server = start_server(repo, "--trace-config", "rate=7", "--trace-config", "count=3")
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as opened:
        yield opened


def test_trace_settings_are_read_only_in_opentelemetry_mode(
    client: grpcclient.InferenceServerClient,
) -> None:
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_mode"]["value"] == ["opentelemetry"]
    assert settings["trace_rate"]["value"] == ["7"]
    assert settings["trace_count"]["value"] == ["3"]
    assert settings["trace_level"]["value"] == ["OFF"]
    with pytest.raises(InferenceServerException) as refused:
        client.update_trace_settings(settings={"trace_rate": "1"})
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    with pytest.raises(InferenceServerException) as unknown:
        client.get_trace_settings(model_name="nope")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"


def test_log_settings_can_be_read_and_changed(client: grpcclient.InferenceServerClient) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"]["bool_param"] is True
    assert settings["log_verbose_level"].get("uint32_param", 0) == 0
    assert settings["log_format"]["string_param"] == "default"
    client.update_log_settings({"log_verbose_level": 1, "log_format": "ISO8601"})
    changed = client.get_log_settings(as_json=True)["settings"]
    assert changed["log_verbose_level"]["uint32_param"] == 1
    assert changed["log_format"]["string_param"] == "ISO8601"
    with pytest.raises(InferenceServerException) as bad:
        client.update_log_settings({"log_format": "xml"})
    assert bad.value.status() == "StatusCode.INVALID_ARGUMENT"
    inputs, _, _ = simple_inputs(1)
    client.infer("simple", inputs)  # still serving


def test_request_events_are_logged_one_line_each_at_verbose_level(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    server = start_server(repo)
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        inputs, _, _ = simple_inputs(1)
        client.infer("simple", inputs, request_id="quiet")
        client.update_log_settings({"log_verbose_level": 1})
        client.infer("simple", inputs, request_id="loud")
        with pytest.raises(InferenceServerException):
            client.infer("simple", inputs, model_version="9", request_id="lost")
    log = server.log()
    assert "id=quiet" not in log  # info level: no per-request lines
    (ok,) = [line for line in log.splitlines() if "id=loud" in line]
    assert "request model=simple version=1 id=loud status=OK" in ok
    assert "batch_size=1 instance=simple_1_0" in ok
    (failed,) = [line for line in log.splitlines() if "id=lost" in line]
    assert "status=ModelNotFoundError" in failed


def test_log_flags_set_the_starting_log_settings(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    server = start_server(repo, "--log-warning", "false", "--log-format", "ISO8601")
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_warning"]["bool_param"] is False
    assert settings["log_info"]["bool_param"] is True
    assert settings["log_format"]["string_param"] == "ISO8601"


def test_exit_on_error_stops_the_start_when_a_model_fails_to_load(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    models.write_model(repo, "broken", None, 'name: "broken"\nmax_batch_sise: 4\n')
    done = subprocess.run(
        serve_command(repo, "--exit-on-error", "true"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 1
    assert "--exit-on-error: model(s) failed to load: 'broken'" in done.stderr
    assert "serving gRPC" not in done.stderr
