"""Model control: none / poll / explicit modes, RepositoryModelLoad (config and file overrides) and
Unload, reloads under continuous load, in-place instance count changes, warmup, the restricted
model-repository group, duplicate names across repositories and model names that try to escape.

Every test writes its own small repository of `simple` variants under tmp_path and starts its own
server; `swapped_simple` (OUTPUT0 = a - b) tells a version apart from `simple` (OUTPUT0 = a + b).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import (
    REPO_ROOT,
    ConvoyServer,
    StartServer,
    serve_command,
    simple_inputs,
    swapped_simple,
)
from google.protobuf import json_format, text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from scripts import models

POLL = ("--model-control-mode", "poll", "--repository-poll-secs", "0.5")
EXPLICIT = ("--model-control-mode", "explicit")
WAIT_S = 15.0  # a poll-mode change must show within this (the interval is 0.5 s)
NO_MODEL_CONTROL = "explicit model load / unload is not allowed if polling is enabled"
ADD, SUB = "add", "sub"  # what OUTPUT0 computed: simple (a + b) or swapped_simple (a - b)

LOAD_CLIENTS = 8
LOAD_PHASE_S = 1.0  # each version serves this long under load

ADMIN = ("model-repository", "admin-key", "secret")


# ---- repositories ------------------------------------------------------------------------------


def simple_config(name: str, **fields: Any) -> dict[str, Any]:
    """`simple`'s config as a JSON ModelConfig dict; `fields` replace top-level entries."""
    tensor = {"data_type": "TYPE_FP32", "dims": [16]}
    config: dict[str, Any] = {
        "name": name,
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}],
        "output": [{"name": "OUTPUT0", **tensor}, {"name": "OUTPUT1", **tensor}],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
    }
    config.update(fields)
    return config


def pbtxt(config: dict[str, Any]) -> str:
    message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    return text_format.MessageToString(message)


def write_simple(
    repo: Path,
    name: str,
    version: int = 1,
    *,
    swapped: bool = False,
    config: dict[str, Any] | None = None,
) -> Path:
    """A `simple` (or swapped) model dir with a config.pbtxt; returns the model dir."""
    model = swapped_simple() if swapped else models.simple(TensorProto.FLOAT)
    return models.write_model(repo, name, model, pbtxt(config or simple_config(name)), version)


def model_bytes(*, swapped: bool = False) -> bytes:
    model = swapped_simple() if swapped else models.simple(TensorProto.FLOAT)
    return model.SerializeToString()


def staged_version(tmp_path: Path, name: str, version: int, *, swapped: bool) -> Path:
    """A version dir written outside the repository, to be renamed into it in one step."""
    staging = tmp_path / f"staging-{uuid.uuid4().hex}"
    model = swapped_simple() if swapped else models.simple(TensorProto.FLOAT)
    models.write_model(staging, name, model, None, version)
    return staging / name / str(version)


def move_out(path: Path, tmp_path: Path) -> None:
    """Remove a directory from the repository in one step (rename away, then delete)."""
    trash = tmp_path / f"trash-{uuid.uuid4().hex}"
    os.rename(path, trash)
    shutil.rmtree(trash)


# ---- client helpers ----------------------------------------------------------------------------


def serve_simple(
    client: grpcclient.InferenceServerClient, name: str, version: str = "", seed: int = 0
) -> tuple[str, str]:
    """One request to a `simple`-like model: (the version that answered, ADD / SUB / "wrong")."""
    inputs, a, b = simple_inputs(2, seed=seed)
    result = client.infer(name, inputs, model_version=version)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    if np.allclose(out0, a + b) and np.allclose(out1, a - b):
        op = ADD
    elif np.allclose(out0, a - b) and np.allclose(out1, a + b):
        op = SUB
    else:
        op = "wrong"
    return result.get_response().model_version, op


def index(
    client: grpcclient.InferenceServerClient, headers: dict[str, str] | None = None
) -> dict[str, list[tuple[str, str, str]]]:
    """RepositoryIndex as name -> [(version, state, reason)]."""
    entries: dict[str, list[tuple[str, str, str]]] = {}
    for model in client.get_model_repository_index(headers=headers).models:
        entries.setdefault(model.name, []).append((model.version, model.state, model.reason))
    return entries


def error_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call(*args, **kwargs)
    return caught.value


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)


def ready_versions(client: grpcclient.InferenceServerClient, name: str) -> list[str]:
    return sorted(v for v, state, _ in index(client).get(name, []) if state == "READY")


def max_batch_size(client: grpcclient.InferenceServerClient, name: str) -> int:
    return int(client.get_model_config(name).config.max_batch_size)


# ---- none and explicit modes -------------------------------------------------------------------


def test_none_mode_refuses_load_and_unload(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo)  # none is the default mode
    with grpcclient.InferenceServerClient(server.url) as client:
        for call in (client.load_model, client.unload_model):
            error = error_of(call, "simple")
            assert error.status() == "StatusCode.UNAVAILABLE"
            assert NO_MODEL_CONTROL in error.message()
        # Refusing changed nothing.
        assert client.is_model_ready("simple")
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


def test_explicit_mode_load_reload_unload_and_load_again(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    write_simple(repo, "other", swapped=True)
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")
    with grpcclient.InferenceServerClient(server.url) as client:
        # Only the named model is loaded; the other is listed as unloaded and does not count
        # against (strict) server readiness.
        entries = index(client)
        assert entries["simple"] == [("1", "READY", "")]
        assert entries["other"] == [("", "UNAVAILABLE", "unloaded")]
        assert not client.is_model_ready("other")
        assert client.is_server_ready()

        client.load_model("other")
        assert client.is_model_ready("other")
        assert serve_simple(client, "other") == ("1", SUB)

        # Reload with a config override: the new config serves at once.
        client.load_model("simple", config=json.dumps(simple_config("simple", max_batch_size=4)))
        assert max_batch_size(client, "simple") == 4
        inputs, _, _ = simple_inputs(5)
        too_big = error_of(client.infer, "simple", inputs)
        assert too_big.status() == "StatusCode.INVALID_ARGUMENT"
        assert serve_simple(client, "simple") == ("1", ADD)

        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        gone = error_of(client.infer, "simple", simple_inputs(1)[0])
        assert gone.status() == "StatusCode.UNAVAILABLE"
        assert "has no available versions" in gone.message()
        assert index(client)["simple"] == [("1", "UNAVAILABLE", "unloaded")]
        assert client.is_server_ready()  # unloaded on purpose
        client.unload_model("simple")  # unloading an unloaded model succeeds

        # Loading again reads config.pbtxt again: the override is gone.
        client.load_model("simple")
        assert client.is_model_ready("simple")
        assert max_batch_size(client, "simple") == 8
        assert serve_simple(client, "simple") == ("1", ADD)
        assert index(client)["simple"] == [("1", "READY", "")]

        # Loading a loaded model reloads it from the repository: a changed file serves.
        model_file = repo / "simple" / "1" / "model.onnx"
        model_file.write_bytes(model_bytes(swapped=True))
        stamp = model_file.stat().st_mtime + 10  # distinct even on coarse-mtime filesystems
        os.utime(model_file, (stamp, stamp))
        client.load_model("simple")
        assert serve_simple(client, "simple") == ("1", SUB)

        missing = error_of(client.load_model, "missing")
        assert missing.status() == "StatusCode.INTERNAL"  # Triton's status for a failed poll
        assert "failed to load 'missing', failed to poll from model repository" in (
            missing.message()
        )
    assert server.stop() == 0


def test_explicit_mode_load_model_star_loads_everything(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    write_simple(repo, "other", swapped=True)
    server = start_server(repo, *EXPLICIT, "--load-model", "*")
    with grpcclient.InferenceServerClient(server.url) as client:
        assert index(client) == {
            "other": [("1", "READY", "")],
            "simple": [("1", "READY", "")],
        }
        assert serve_simple(client, "other") == ("1", SUB)
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


def test_config_and_file_overrides(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo, *EXPLICIT)
    with grpcclient.InferenceServerClient(server.url) as client:
        assert not client.is_model_ready("simple")
        # A first load with a config override never reads config.pbtxt.
        client.load_model("simple", config=json.dumps(simple_config("simple", max_batch_size=2)))
        assert max_batch_size(client, "simple") == 2
        assert serve_simple(client, "simple") == ("1", ADD)

        # A model that is not in the repository at all, served from the request's bytes.
        client.load_model(
            "fresh",
            config=json.dumps(simple_config("fresh")),
            files={"file:1/model.onnx": model_bytes(swapped=True)},
        )
        assert client.is_model_ready("fresh")
        assert index(client)["fresh"] == [("1", "READY", "")]
        for seed in range(3):
            assert serve_simple(client, "fresh", seed=seed) == ("1", SUB)

        # Files replace a repository model's files for that load; a plain load goes back.
        client.load_model(
            "simple",
            config=json.dumps(simple_config("simple")),
            files={"file:3/model.onnx": model_bytes(swapped=True)},
        )
        assert serve_simple(client, "simple") == ("3", SUB)
        client.load_model("simple")
        assert serve_simple(client, "simple") == ("1", ADD)

        # Files need a config; a config must be a JSON ModelConfig.
        no_config = error_of(
            client.load_model, "lonely", files={"file:1/model.onnx": model_bytes()}
        )
        assert no_config.status() == "StatusCode.INTERNAL"  # as Triton: the model is not polled
        assert "config" in no_config.message()
        bad_json = error_of(client.load_model, "simple", config="{not json")
        assert bad_json.status() == "StatusCode.INTERNAL"
        assert "lonely" not in index(client)
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


# ---- reloads -----------------------------------------------------------------------------------


def test_reload_under_continuous_load_loses_no_request(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"

    def pick(version: int) -> str:
        policy = {"specific": {"versions": [version]}}
        return json.dumps(simple_config("simple", version_policy=policy))

    write_simple(
        repo,
        "simple",
        1,
        config=simple_config("simple", version_policy={"specific": {"versions": [1]}}),
    )
    models.write_model(repo, "simple", swapped_simple(), None, version=2)
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")

    stop = threading.Event()
    # (sent, answered, version, op) per answer, and every failure.
    answers: list[tuple[float, float, str, str]] = []
    failures: list[str] = []
    lock = threading.Lock()

    def hammer(seed: int) -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    version, op = serve_simple(client, "simple", seed=seed)
                except InferenceServerException as exc:
                    with lock:
                        failures.append(f"{exc.status()}: {exc.message()}")
                    continue
                with lock:
                    answers.append((sent, time.monotonic(), version, op))

    # Phases: version 1, then 2, then 1 again; (started, returned) of each reload.
    reloads: list[tuple[float, float, str]] = []
    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(LOAD_CLIENTS)]
    with grpcclient.InferenceServerClient(server.url) as control:
        for thread in threads:
            thread.start()
        try:
            for version in (2, 1):
                time.sleep(LOAD_PHASE_S)
                started = time.monotonic()
                control.load_model("simple", config=pick(version))
                reloads.append((started, time.monotonic(), str(version)))
            time.sleep(LOAD_PHASE_S)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        assert control.is_model_ready("simple")
        assert index(control)["simple"] == [("1", "READY", "")]

    assert not failures, f"{len(failures)} of {len(failures) + len(answers)} failed: {failures[:5]}"
    wrong = [a for a in answers if (a[2], a[3]) not in (("1", ADD), ("2", SUB))]
    assert not wrong, f"answers that do not match their version: {wrong[:5]}"
    served = {version: sum(a[2] == version for a in answers) for version in ("1", "2")}
    assert served["1"] >= 20 and served["2"] >= 20, served
    # A request sent after a reload returned is answered by the version it loaded (until the
    # next reload starts).
    bounds = [*reloads, (float("inf"), float("inf"), "")]
    for (_, returned, version), (next_start, _, _) in itertools.pairwise(bounds):
        late = [a for a in answers if returned < a[0] and a[1] < next_start and a[2] != version]
        assert not late, f"after the reload to {version}: {late[:5]}"
    assert server.stop() == 0


def test_unload_under_load_refuses_cleanly(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")
    stop = threading.Event()
    answers: list[tuple[float, tuple[str, str]]] = []
    failures: list[tuple[float, str, str]] = []

    def hammer(seed: int) -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    answers.append((sent, serve_simple(client, "simple", seed=seed)))
                except InferenceServerException as exc:
                    failures.append((sent, str(exc.status()), str(exc.message())))

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(LOAD_CLIENTS)]
    with grpcclient.InferenceServerClient(server.url) as control:
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            control.unload_model("simple")
            unloaded = time.monotonic()
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        assert not control.is_model_ready("simple")
        control.load_model("simple")
        assert serve_simple(control, "simple") == ("1", ADD)
    assert answers and failures
    assert all(answer == ("1", ADD) for _, answer in answers)
    odd = [f for f in failures if f[1] != "StatusCode.UNAVAILABLE"]
    assert not odd, odd[:5]
    assert not [a for a in answers if a[0] > unloaded], "answered after the unload returned"
    assert server.stop() == 0


def test_a_broken_reload_keeps_the_old_version_serving(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")
    wrong_input = simple_config("simple")
    wrong_input["input"][1]["name"] = "INPUT9"
    missing_version = simple_config("simple", version_policy={"specific": {"versions": [7]}})
    with grpcclient.InferenceServerClient(server.url) as client:
        renamed = simple_config("renamed")
        for config, problem in (
            (wrong_input, "INPUT9"),
            (missing_version, "version 7"),
            (renamed, "renamed"),
        ):
            error = error_of(client.load_model, "simple", config=json.dumps(config))
            assert error.status() == "StatusCode.INVALID_ARGUMENT"
            assert "load failed for model 'simple'" in error.message()
            assert problem in error.message()
            assert client.is_model_ready("simple")
            assert serve_simple(client, "simple") == ("1", ADD)
            served = client.get_model_config("simple").config
            assert [t.name for t in served.input] == ["INPUT0", "INPUT1"]
            assert index(client)["simple"] == [("1", "READY", "")]
        # The broken attempts left nothing behind: a good reload still works.
        client.load_model("simple", config=json.dumps(simple_config("simple", max_batch_size=3)))
        assert max_batch_size(client, "simple") == 3
    assert server.stop() == 0


def test_instance_count_change_resizes_in_place(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")

    def counted(count: int) -> str:
        return json.dumps(
            simple_config("simple", instance_group=[{"count": count, "kind": "KIND_CPU"}])
        )

    def inference_count(client: grpcclient.InferenceServerClient) -> int:
        stats = client.get_inference_statistics("simple").model_stats
        return int(stats[0].inference_count)

    stop = threading.Event()
    results: list[tuple[str, str] | str] = []

    def background() -> None:
        with grpcclient.InferenceServerClient(server.url) as client:
            while not stop.is_set():
                try:
                    results.append(serve_simple(client, "simple"))
                except InferenceServerException as exc:
                    results.append(f"{exc.status()}: {exc.message()}")

    with grpcclient.InferenceServerClient(server.url) as client:
        for _ in range(3):
            assert serve_simple(client, "simple") == ("1", ADD)
        threads = [threading.Thread(target=background) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            for count in (3, 1):
                before = inference_count(client)
                client.load_model("simple", config=counted(count))
                served = client.get_model_config("simple").config
                assert [g.count for g in served.instance_group] == [count]
                # The same version kept serving: its statistics were not reset by a reload.
                assert inference_count(client) >= before >= 3
                assert serve_simple(client, "simple") == ("1", ADD)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
    assert results
    assert all(r == ("1", ADD) for r in results), [r for r in results if r != ("1", ADD)][:5]
    assert server.stop() == 0


# ---- poll mode ---------------------------------------------------------------------------------


def test_poll_mode_applies_repository_changes(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    write_simple(repo, "both", config=simple_config("both", version_policy={"all": {}}))
    server = start_server(repo, *POLL)
    with grpcclient.InferenceServerClient(server.url) as client:
        refused = error_of(client.load_model, "simple")
        assert refused.status() == "StatusCode.UNAVAILABLE"
        assert NO_MODEL_CONTROL in refused.message()

        # A new model directory is loaded.
        staging = tmp_path / "staging"
        write_simple(staging, "added")
        os.rename(staging / "added", repo / "added")
        wait_for("'added' to load", lambda: ready_versions(client, "added") == ["1"])
        assert serve_simple(client, "added") == ("1", ADD)

        # A new version: latest 1 serves only it; `all` serves both.
        os.rename(staged_version(tmp_path, "added", 2, swapped=True), repo / "added" / "2")
        os.rename(staged_version(tmp_path, "both", 2, swapped=True), repo / "both" / "2")
        wait_for("'added' version 2", lambda: index(client)["added"] == [("2", "READY", "")])
        assert serve_simple(client, "added") == ("2", SUB)
        wait_for("'both' versions 1 and 2", lambda: ready_versions(client, "both") == ["1", "2"])
        assert serve_simple(client, "both", "1") == ("1", ADD)
        assert serve_simple(client, "both", "2") == ("2", SUB)
        assert serve_simple(client, "both") == ("2", SUB)

        # The version removed: version 1 serves again.
        move_out(repo / "added" / "2", tmp_path)
        wait_for(
            "'added' back at version 1", lambda: index(client)["added"] == [("1", "READY", "")]
        )
        assert serve_simple(client, "added") == ("1", ADD)

        # A changed config.pbtxt reloads the model.
        new_config = tmp_path / "config.pbtxt"
        new_config.write_text(pbtxt(simple_config("added", max_batch_size=5)), encoding="utf-8")
        os.replace(new_config, repo / "added" / "config.pbtxt")
        wait_for("the new config", lambda: max_batch_size(client, "added") == 5)
        assert serve_simple(client, "added") == ("1", ADD)

        # The model directory removed: gone from the index, unknown to inference.
        move_out(repo / "added", tmp_path)
        wait_for("'added' to leave the index", lambda: "added" not in index(client))
        unknown = error_of(client.infer, "added", simple_inputs(1)[0])
        assert unknown.status() == "StatusCode.NOT_FOUND"

        # A half-written model file in a new version dir: the old version keeps serving and the
        # server stays up; the finished file then loads.
        full = model_bytes(swapped=True)
        (repo / "simple" / "2").mkdir()
        (repo / "simple" / "2" / "model.onnx").write_bytes(full[: len(full) // 2])
        wait_for(
            "the half-written file to be tried",
            lambda: "reload of model 'simple' failed" in server.log(),
        )
        assert client.is_server_live()
        assert client.is_model_ready("simple")
        assert serve_simple(client, "simple") == ("1", ADD)
        assert index(client)["simple"] == [("1", "READY", "")]
        (repo / "simple" / "2" / "model.onnx").write_bytes(full)
        wait_for("the finished file", lambda: index(client)["simple"] == [("2", "READY", "")])
        assert serve_simple(client, "simple") == ("2", SUB)
    assert server.stop() == 0


def test_poll_mode_retries_failed_files_when_they_change(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    server = start_server(repo, *POLL, "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as client:
        # A new model whose file is still being written: unavailable with a reason, then loaded
        # once the file is complete.
        full = model_bytes(swapped=True)
        late = models.write_model(repo, "late", None, pbtxt(simple_config("late")))
        (late / "1").mkdir()
        (late / "1" / "model.onnx").write_bytes(full[: len(full) // 3])
        wait_for("'late' to be tried", lambda: "late" in index(client))
        wait_for("'late' to fail", lambda: index(client)["late"][0][1] == "UNAVAILABLE")
        [(_, _, reason)] = index(client)["late"]
        assert reason
        assert client.is_server_live()
        (late / "1" / "model.onnx").write_bytes(full)
        wait_for("'late' to load", lambda: index(client)["late"] == [("1", "READY", "")])
        assert serve_simple(client, "late") == ("1", SUB)

        # A config.pbtxt with a typo: the old config keeps serving; the fixed file reloads.
        config = repo / "simple" / "config.pbtxt"
        config.write_text(pbtxt(simple_config("simple")) + "max_batch_sise: 3\n", "utf-8")
        wait_for(
            "the broken config to be tried",
            lambda: "reload of model 'simple' failed" in server.log(),
        )
        assert max_batch_size(client, "simple") == 8
        assert serve_simple(client, "simple") == ("1", ADD)
        config.write_text(pbtxt(simple_config("simple", max_batch_size=3)), "utf-8")
        wait_for("the fixed config", lambda: max_batch_size(client, "simple") == 3)
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


def test_poll_mode_unloads_a_version_whose_file_goes_before_its_dir(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    models.write_model(repo, "simple", swapped_simple(), None, version=2)
    server = start_server(repo, *POLL)
    with grpcclient.InferenceServerClient(server.url) as client:
        assert serve_simple(client, "simple") == ("2", SUB)
        # `rm -r simple/2` as a poll may catch it: the file gone, the empty dir still there.
        (repo / "simple" / "2" / "model.onnx").unlink()
        wait_for(
            "the emptied version dir to be tried",
            lambda: "reload of model 'simple' failed" in server.log(),
        )
        (repo / "simple" / "2").rmdir()
        wait_for(
            "version 1 to serve again",
            lambda: index(client)["simple"] == [("1", "READY", "")],
            timeout_s=3.0,  # six polls
        )
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


# ---- warmup ------------------------------------------------------------------------------------


def warmup_config(name: str, **inputs: dict[str, Any]) -> dict[str, Any]:
    return simple_config(name, model_warmup=[{"name": "w", "batch_size": 2, "inputs": inputs}])


def test_warmup_gates_readiness(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    zeros = {"data_type": "TYPE_FP32", "dims": [16], "zero_data": True}
    randoms = {"data_type": "TYPE_FP32", "dims": [16], "random_data": True}
    write_simple(repo, "warm_zero", config=warmup_config("warm_zero", INPUT0=zeros, INPUT1=zeros))
    write_simple(
        repo, "warm_random", config=warmup_config("warm_random", INPUT0=randoms, INPUT1=zeros)
    )
    write_simple(
        repo,
        "warm_bad_dims",
        config=warmup_config("warm_bad_dims", INPUT0={**zeros, "dims": [15]}, INPUT1=zeros),
    )
    for name, size in (("warm_file", 16), ("warm_file_short", 15)):
        from_file = {"data_type": "TYPE_FP32", "dims": [16], "input_data_file": "in0.bin"}
        model_dir = write_simple(
            repo, name, config=warmup_config(name, INPUT0=from_file, INPUT1=zeros)
        )
        (model_dir / "warmup").mkdir()
        data = np.arange(size, dtype=np.float32).tobytes()
        (model_dir / "warmup" / "in0.bin").write_bytes(data)
    escape = {"data_type": "TYPE_FP32", "dims": [16], "input_data_file": "../config.pbtxt"}
    write_simple(
        repo, "warm_escape", config=warmup_config("warm_escape", INPUT0=escape, INPUT1=zeros)
    )
    server = start_server(repo, "--strict-readiness", "false")
    with grpcclient.InferenceServerClient(server.url) as client:
        entries = index(client)
        for name in ("warm_zero", "warm_random", "warm_file"):
            assert entries[name] == [("1", "READY", "")], name
            assert serve_simple(client, name) == ("1", ADD)
        for name, problem in (
            ("warm_bad_dims", "15"),
            ("warm_file_short", "byte size"),
            ("warm_escape", "outside warmup/"),
        ):
            [(version, state, reason)] = entries[name]
            assert (version, state) == ("1", "UNAVAILABLE"), name
            assert "warmup" in reason and problem in reason, (name, reason)
            assert not client.is_model_ready(name)
    assert server.stop() == 0


# ---- restricted protocol -----------------------------------------------------------------------


def test_restricted_model_repository_group(start_server: StartServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    group, key, value = ADMIN
    server = start_server(
        repo,
        *EXPLICIT,
        "--load-model",
        "simple",
        "--grpc-restricted-protocol",
        f"{group}:{key}={value}",
    )
    expected = f"This API is restricted, expecting header '{key}'"
    with grpcclient.InferenceServerClient(server.url) as client:
        for headers in (None, {key: "wrong"}, {"other-key": value}):
            for call, args in (
                (client.get_model_repository_index, ()),
                (client.load_model, ("simple",)),
                (client.unload_model, ("simple",)),
            ):
                error = error_of(call, *args, headers=headers)
                assert error.status() == "StatusCode.UNAVAILABLE", (call, headers)
                assert expected in error.message()
        assert client.is_model_ready("simple")  # the refused unload did nothing

        admin = {key: value}
        assert index(client, admin)["simple"] == [("1", "READY", "")]
        client.unload_model("simple", headers=admin)
        assert not client.is_model_ready("simple")
        client.load_model("simple", headers=admin)
        # Inference and the other groups stay open.
        assert client.is_model_ready("simple")
        assert client.get_model_config("simple").config.max_batch_size == 8
        assert serve_simple(client, "simple") == ("1", ADD)
    assert server.stop() == 0


# ---- several repositories, names, shutdown -----------------------------------------------------


@pytest.mark.parametrize("mode", ["none", "explicit"])
def test_a_model_name_in_two_repositories_fails_the_start(tmp_path: Path, mode: str) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_simple(first, "simple")
    write_simple(first, "only_first")
    write_simple(second, "simple", swapped=True)
    command = serve_command(
        first,
        "--model-repository",
        str(second),
        "--model-control-mode",
        mode,
        "--load-model",
        "only_first",
    )
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False)
    log = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode != 0, log
    assert time.monotonic() - started < 30
    assert str(first / "simple") in log and str(second / "simple") in log, log
    assert "serving gRPC" not in log


def test_model_names_and_file_keys_cannot_leave_the_repository(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    write_simple(tmp_path, "outside", swapped=True)  # a valid model beside the repository
    write_simple(repo, ".hidden")
    server = start_server(repo, *EXPLICIT)
    escaped = Path(tempfile.gettempdir()) / f"evil-{uuid.uuid4().hex}"
    absolute = tmp_path / "absolute-evil"
    with grpcclient.InferenceServerClient(server.url) as client:
        for name in ("../outside", "a/b", "..", ".", ".hidden", "", "a\\b", "simple/../outside"):
            for call in (client.load_model, client.unload_model):
                error = error_of(call, name)
                assert error.status() == "StatusCode.INVALID_ARGUMENT", (call, name)
                assert "invalid model name" in error.message(), name
        config = json.dumps(simple_config("fresh"))
        for key in (f"file:../../{escaped.name}", f"file:{absolute}", "file:1/../../escaped"):
            error = error_of(client.load_model, "fresh", config=config, files={key: b"x"})
            assert error.status() == "StatusCode.INTERNAL", key  # not polled, as in Triton
        assert not escaped.exists()
        assert not absolute.exists()
        assert set(index(client)) == {"simple"}
        assert not client.is_model_ready("outside")
    assert server.stop() == 0


def test_sigterm_with_models_loaded_through_the_api_exits_0(
    start_server: StartServer, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_simple(repo, "simple")
    write_simple(repo, "other", swapped=True)
    server: ConvoyServer = start_server(repo, *EXPLICIT)
    with grpcclient.InferenceServerClient(server.url) as client:
        client.load_model("simple")
        client.load_model("other")
        client.load_model("simple", config=json.dumps(simple_config("simple", max_batch_size=4)))
        client.load_model(
            "fresh",
            config=json.dumps(simple_config("fresh")),
            files={"file:1/model.onnx": model_bytes()},
        )
        client.unload_model("other")
        assert serve_simple(client, "fresh") == ("1", ADD)
    assert server.stop() == 0
    assert "Traceback" not in server.log()


def test_the_checksum_agent_keeps_a_changed_file_from_loading(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Triton's checksum repository agent: the model loads while its file matches the MD5 its
    config gives; once the file changes, a reload fails saying so, and the loaded version keeps
    serving."""
    repo = tmp_path / "repo"
    model_dir = write_simple(repo, "simple")
    digest = hashlib.md5((model_dir / "1" / "model.onnx").read_bytes()).hexdigest()
    agents = {"agents": [{"name": "checksum", "parameters": {"MD5:1/model.onnx": digest}}]}
    (model_dir / "config.pbtxt").write_text(
        pbtxt(simple_config("simple", model_repository_agents=agents))
    )
    server = start_server(repo, *EXPLICIT, "--load-model", "simple")
    with grpcclient.InferenceServerClient(server.url) as client:
        assert serve_simple(client, "simple") == ("1", ADD)
        write_simple(repo, "simple", swapped=True)  # the file changes; its config does not
        (model_dir / "config.pbtxt").write_text(
            pbtxt(simple_config("simple", model_repository_agents=agents))
        )
        refused = error_of(client.load_model, "simple")
        assert "the MD5 checksum of '1/model.onnx' is" in refused.message()
        assert serve_simple(client, "simple") == ("1", ADD)
