"""Cloud model repositories end to end: a real S3-compatible server (moto's, in its own process on
127.0.0.1, IAM authentication on) holds a generated repository; Convoy serves it in the three
model control modes beside a local one, picks up changed and added objects when polling, and
names the location when the bucket, the credentials or the endpoint are wrong. gs:// and as://
are served the same way from gcp-storage-emulator and Azurite."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import (
    REPO_ROOT,
    ConvoyServer,
    StartServer,
    infer_input,
    serve_command,
    simple_inputs,
    swapped_simple,
)
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models
from tests.azurite import Azurite, azurite_binary
from tests.gcs_emulator import GcsEmulator
from tests.moto_server import MotoServer, free_port

BUCKET = "convoy-models"
WAIT_S = 30.0
SIMPLE_CONFIG = (
    'name: "simple"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
    '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
    '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_in_process(tmp_path: Path) -> Iterator[StartServer]:
    """Servers with the front ends in the core process only, for the tests whose subject is the
    core's repository alone (the worker processes change nothing there)."""
    started: list[ConvoyServer] = []

    def start(repository: str, *flags: str) -> ConvoyServer:
        server = ConvoyServer(repository, tmp_path / f"server-{len(started)}.log", *flags)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A folder of the bucket for this test alone (each runs in-process and with workers)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", request.node.name)


def _identity(repo: Path, name: str) -> None:
    config = models.identity_config(name, TensorProto.FLOAT)
    models.write_model(repo, name, models.identity(TensorProto.FLOAT), config)


def _cloud_repository(root: Path) -> Path:
    repo = root / "cloud"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), SIMPLE_CONFIG)
    _identity(repo, "identity")
    return repo


def _local_repository(root: Path) -> Path:
    repo = root / "local"
    _identity(repo, "local_identity")
    return repo


def _serve(
    start_server: StartServer,
    store: MotoServer | GcsEmulator | Azurite,
    location: str,
    *flags: str,
    env: dict[str, str] | None = None,
) -> ConvoyServer:
    """A Convoy process with what reaches the store (keys, an emulator) in its environment."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**store.env(), **(env or {})}.items():
            patch.setenv(name, value)
        return start_server(location, *flags)


def _wait_for(condition: Callable[[], bool], server: ConvoyServer, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {WAIT_S} s; log:\n{server.log()}")
        time.sleep(0.1)


def _simple_output0(
    client: grpcclient.InferenceServerClient,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    inputs, a, b = simple_inputs(1)
    result = client.infer("simple", inputs)
    return result.as_numpy("OUTPUT0"), a, b


def _identity_works(client: grpcclient.InferenceServerClient, name: str) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    out = client.infer(name, [infer_input("INPUT0", x, "FP32")]).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, x)


def _safe_ready(client: grpcclient.InferenceServerClient, name: str, version: str = "") -> bool:
    with contextlib.suppress(InferenceServerException):
        return bool(client.is_model_ready(name, version))
    return False


def test_poll_serves_an_s3_repository_and_applies_its_changes(
    start_server: StartServer, moto: MotoServer, tmp_path: Path, prefix: str
) -> None:
    moto.upload(_cloud_repository(tmp_path), BUCKET, prefix)
    local = _local_repository(tmp_path)
    location = f"s3://{moto.host_port}/{BUCKET}/{prefix}"
    mount = tmp_path / "mount"
    mount.mkdir()
    server = _serve(
        start_server,
        moto,
        location,
        "--model-repository",
        str(local),
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "1",
        env={"TRITON_AWS_MOUNT_DIRECTORY": str(mount)},
    )
    assert [p.name.startswith("convoy-s3-") for p in mount.iterdir()] == [True]
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        out, a, b = _simple_output0(client)
        np.testing.assert_allclose(out, a + b)
        _identity_works(client, "identity")
        _identity_works(client, "local_identity")

        # A new version of one model (the default policy serves the latest) and a new model.
        s3 = moto.client()
        added = tmp_path / "added"
        _identity(added, "added")
        moto.upload(added, BUCKET, prefix)
        s3.put_object(
            Bucket=BUCKET,
            Key=f"{prefix}/simple/2/model.onnx",
            Body=swapped_simple().SerializeToString(),
        )
        _wait_for(lambda: _safe_ready(client, "simple", "2"), server, "simple version 2")
        _wait_for(lambda: _safe_ready(client, "added"), server, "the added model")
        out, a, b = _simple_output0(client)
        np.testing.assert_allclose(out, a - b)  # version 2 answers
        _identity_works(client, "added")

        # A model removed from the bucket is unloaded.
        s3.delete_objects(
            Bucket=BUCKET,
            Delete={
                "Objects": [
                    {"Key": f"{prefix}/identity/config.pbtxt"},
                    {"Key": f"{prefix}/identity/1/model.onnx"},
                ]
            },
        )
        _wait_for(lambda: not _safe_ready(client, "identity"), server, "the unload of identity")
        _identity_works(client, "local_identity")
    assert server.stop() == 0
    assert list(mount.iterdir()) == []  # the local copy is removed at stop
    log = server.log()
    # Only what changed was loaded again.
    assert log.count("loaded model 'simple' version 1") == 1
    assert log.count("loaded model 'simple' version 2") == 1
    assert log.count("loaded model 'local_identity' version 1") == 1
    assert log.count("loaded model 'added' version 1") == 1


def test_a_store_that_hangs_mid_poll_neither_stops_serving_nor_holds_the_exit(
    start_server: StartServer, moto: MotoServer, tmp_path: Path, prefix: str
) -> None:
    """S3 stops answering while a poll reads it (moto stopped: its connections stay open, and
    each read waits out boto3's 60 s, three times): the models keep serving, and a stop exits
    at once. Before, the poll's thread held the exit until S3's timeouts ran out, minutes
    after the server had logged "stopped"."""
    moto.upload(_cloud_repository(tmp_path), BUCKET, prefix)
    location = f"s3://{moto.host_port}/{BUCKET}/{prefix}"
    poll = ("--model-control-mode", "poll", "--repository-poll-secs", "1")
    server = _serve(start_server, moto, location, *poll)
    assert moto.process is not None
    moto.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(2.5)  # polls every second: one now waits on S3
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
            output0, a, b = _simple_output0(client)
            np.testing.assert_array_equal(output0, a + b)
        started = time.monotonic()
        assert server.stop(timeout_s=20) == 0, server.log()
        assert time.monotonic() - started < 10
    finally:
        moto.process.send_signal(signal.SIGCONT)


def test_explicit_mode_loads_and_unloads_models_of_an_s3_repository(
    start_server: StartServer, moto: MotoServer, tmp_path: Path, prefix: str
) -> None:
    moto.upload(_cloud_repository(tmp_path), BUCKET, prefix)
    location = f"s3://{moto.host_port}/{BUCKET}/{prefix}"
    server = _serve(
        start_server, moto, location, "--model-control-mode", "explicit", "--load-model", "simple"
    )
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        assert _safe_ready(client, "simple")
        index = {m.name: m.state for m in client.get_model_repository_index().models}
        assert index == {"simple": "READY", "identity": "UNAVAILABLE"}
        assert not _safe_ready(client, "identity")
        client.load_model("identity")
        _identity_works(client, "identity")
        client.unload_model("identity")
        assert not _safe_ready(client, "identity")

        late = tmp_path / "late"
        _identity(late, "late")
        moto.upload(late, BUCKET, prefix)  # added after the start: a load reads the bucket
        client.load_model("late")
        _identity_works(client, "late")

        with pytest.raises(InferenceServerException) as caught:
            client.load_model("nowhere")
        assert caught.value.status() == "StatusCode.INTERNAL"
        assert "failed to load 'nowhere', failed to poll from model repository" in str(caught.value)


@pytest.mark.parametrize(
    ("location", "env", "words"),
    [
        (
            "s3://{host}/convoy-no-such-bucket/models",
            {},
            "bucket 'convoy-no-such-bucket' does not exist",
        ),
        (
            "s3://{host}/" + BUCKET + "/models",
            {"AWS_ACCESS_KEY_ID": "AKIAWRONG", "AWS_SECRET_ACCESS_KEY": "wrong"},
            "the credentials were refused (InvalidAccessKeyId",
        ),
        ("s3://127.0.0.1:{dead}/" + BUCKET + "/models", {}, "cannot use http://127.0.0.1:"),
    ],
    ids=["missing-bucket", "bad-credentials", "dead-endpoint"],
)
def test_exit_on_error_stops_a_start_whose_s3_repository_cannot_be_read(
    moto: MotoServer, tmp_path: Path, location: str, env: dict[str, str], words: str
) -> None:
    text = location.format(host=moto.host_port, dead=free_port())
    local = _local_repository(tmp_path)
    command = serve_command(text, "--model-repository", str(local), "--exit-on-error", "true")
    mount = tmp_path / "mount"
    mount.mkdir()
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env={**_plain_env(), **moto.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"model repository '{text}' is unavailable" in done.stderr
    assert words in done.stderr
    assert list(mount.iterdir()) == []


@pytest.mark.parametrize(
    ("location", "module", "extra"),
    [
        ("s3://bucket/models", "boto3", "s3"),
        ("gs://bucket/models", "gcloud.rest.storage", "gcs"),
        ("as://account/container/models", "azure.storage.blob", "azure"),
    ],
)
def test_a_missing_storage_library_names_the_extra_to_install(
    location: str, module: str, extra: str
) -> None:
    """Run where the library cannot be imported (None in sys.modules blocks it)."""
    argv = ["server", *serve_command(location)[3:]]
    code = (
        f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = {argv!r}; "
        "runpy.run_module('server', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert f"need the '{module}' package" in done.stderr
    assert f"pip install 'convoy[{extra}]'" in done.stderr


def test_an_unreadable_s3_repository_leaves_the_other_repositories_serving(
    start_in_process: StartServer, moto: MotoServer, tmp_path: Path
) -> None:
    text = f"s3://{moto.host_port}/convoy-no-such-bucket/models"
    local = _local_repository(tmp_path)
    server = _serve(start_in_process, moto, text, "--model-repository", str(local))
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        _identity_works(client, "local_identity")
        assert client.is_server_ready()
    assert f"model repository '{text}' is unavailable" in server.log()


def test_a_repository_unreadable_at_start_is_served_once_a_poll_can_read_it(
    start_in_process: StartServer, moto: MotoServer, tmp_path: Path
) -> None:
    bucket = "convoy-late-bucket"
    location = f"s3://{moto.host_port}/{bucket}/models"
    local = _local_repository(tmp_path)
    server = _serve(
        start_in_process,
        moto,
        location,
        "--model-repository",
        str(local),
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "1",
    )
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        _identity_works(client, "local_identity")
        moto.client().create_bucket(Bucket=bucket)
        moto.upload(_cloud_repository(tmp_path), bucket, "models")
        _wait_for(lambda: _safe_ready(client, "simple"), server, "the late repository's models")
        out, a, b = _simple_output0(client)
        np.testing.assert_allclose(out, a + b)
    assert f"model repository '{location}' is available again" in server.log()


def test_a_poll_that_cannot_reach_the_endpoint_keeps_the_models_serving(
    start_in_process: StartServer, tmp_path: Path, prefix: str
) -> None:
    own = MotoServer(tmp_path / "moto.log").start()  # this test stops it
    try:
        own.client().create_bucket(Bucket=BUCKET)
        own.upload(_cloud_repository(tmp_path), BUCKET, prefix)
        location = f"s3://{own.host_port}/{BUCKET}/{prefix}"
        server = _serve(
            start_in_process,
            own,
            location,
            "--model-control-mode",
            "poll",
            "--repository-poll-secs",
            "1",
        )
        own.stop()
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
            _wait_for(
                lambda: "its models stay as last read" in server.log(),
                server,
                "the failed poll's log line",
            )
            out, a, b = _simple_output0(client)
            np.testing.assert_allclose(out, a + b)
            _identity_works(client, "identity")
        assert f"model repository '{location}' is unavailable" in server.log()
    finally:
        own.stop()


def _gcs(log_dir: Path) -> tuple[GcsEmulator, str]:
    """gcp-storage-emulator: no credentials (the emulator checks none)."""
    store = GcsEmulator(log_dir / "gcs.log").start()
    try:
        store.create_bucket(BUCKET)
    except BaseException:
        store.stop()
        raise
    return store, f"gs://{BUCKET}"


def _azure(log_dir: Path) -> tuple[Azurite, str]:
    """Azurite, reached through AZURE_STORAGE_CONNECTION_STRING (its shared key checked)."""
    if azurite_binary() is None:
        pytest.skip("azurite-blob is not installed (npm install -g azurite)")
    store = Azurite(log_dir / "azurite.log").start()
    try:
        store.client().create_container(BUCKET)
    except BaseException:
        store.stop()
        raise
    return store, f"as://devstoreaccount1/{BUCKET}"


@pytest.mark.parametrize("emulated", [_gcs, _azure], ids=["gs", "as"])
def test_poll_serves_an_emulated_repository_and_picks_up_an_added_model(
    start_in_process: StartServer,
    tmp_path: Path,
    prefix: str,
    emulated: Callable[[Path], tuple[GcsEmulator | Azurite, str]],
) -> None:
    store, bucket = emulated(tmp_path)
    try:
        store.upload(_cloud_repository(tmp_path), BUCKET, prefix)
        location = f"{bucket}/{prefix}"
        server = _serve(
            start_in_process,
            store,
            location,
            "--model-control-mode",
            "poll",
            "--repository-poll-secs",
            "1",
        )
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
            out, a, b = _simple_output0(client)
            np.testing.assert_allclose(out, a + b)
            added = tmp_path / "added"
            _identity(added, "added")
            store.upload(added, BUCKET, prefix)
            _wait_for(lambda: _safe_ready(client, "added"), server, "the added model")
            _identity_works(client, "added")
        assert server.log().count("loaded model 'simple' version 1") == 1
    finally:
        store.stop()


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
