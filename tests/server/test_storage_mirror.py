"""A cloud repository's local copy (server.core.storage.Mirror) against a real S3-compatible
server (moto's), a GCS emulator and Azurite, each in its own process on 127.0.0.1: what a sync
downloads, keeps and removes, and how it fails."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.core.storage import CloudRepositories, Mirror, StorageUnavailableError
from tests.azurite import Azurite, azurite_binary
from tests.gcs_emulator import GcsEmulator, refusing_token_endpoint
from tests.moto_server import MotoServer, free_port

BUCKET = "convoy-mirror"


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return request.node.name.replace("[", "-").replace("]", "")  # one folder per test


@pytest.fixture
def clouds(moto: MotoServer) -> Iterator[CloudRepositories]:
    repositories = CloudRepositories(moto.env())
    yield repositories
    repositories.close()


def _put(moto: MotoServer, prefix: str, objects: dict[str, bytes]) -> None:
    s3 = moto.client()
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=body)


def _files(mirror: Mirror) -> dict[str, bytes]:
    root = mirror.root
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _mtimes(mirror: Mirror) -> dict[str, int]:
    root = mirror.root
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


async def test_a_sync_downloads_only_what_changed(
    moto: MotoServer, clouds: CloudRepositories, prefix: str
) -> None:
    _put(moto, prefix, {"a/config.pbtxt": b"a1", "a/1/model.onnx": b"A", "b/1/model.onnx": b"B"})
    mirror = clouds.mirror(f"s3://{moto.host_port}/{BUCKET}/{prefix}")
    await mirror.sync()
    assert _files(mirror) == {
        "a/config.pbtxt": b"a1",
        "a/1/model.onnx": b"A",
        "b/1/model.onnx": b"B",
    }
    before = _mtimes(mirror)
    await mirror.sync()  # nothing changed: nothing is written
    assert _mtimes(mirror) == before

    _put(moto, prefix, {"a/config.pbtxt": b"a2", "c/1/model.onnx": b"C"})
    moto.client().delete_object(Bucket=BUCKET, Key=f"{prefix}/b/1/model.onnx")
    await mirror.sync()
    assert _files(mirror) == {
        "a/config.pbtxt": b"a2",
        "a/1/model.onnx": b"A",
        "c/1/model.onnx": b"C",
    }
    after = _mtimes(mirror)
    assert after["a/1/model.onnx"] == before["a/1/model.onnx"]  # unchanged, not downloaded
    assert after["a/config.pbtxt"] != before["a/config.pbtxt"]
    assert not (mirror.root / "b").exists()  # a model gone leaves no directory behind


async def test_a_sync_of_some_models_lists_all_and_downloads_those(
    moto: MotoServer, clouds: CloudRepositories, prefix: str
) -> None:
    _put(moto, prefix, {"a/1/model.onnx": b"A", "b/1/model.onnx": b"B"})
    mirror = clouds.mirror(f"s3://{moto.host_port}/{BUCKET}/{prefix}")
    await mirror.sync({"a"})
    assert _files(mirror) == {"a/1/model.onnx": b"A"}
    assert (mirror.root / "b").is_dir()  # listed, so the index shows it
    await mirror.sync({"b"})
    assert _files(mirror) == {"a/1/model.onnx": b"A", "b/1/model.onnx": b"B"}


async def test_keys_outside_a_model_directory_are_ignored(
    moto: MotoServer, clouds: CloudRepositories, prefix: str
) -> None:
    _put(
        moto,
        prefix,
        {
            "README.md": b"beside the models",
            "a/../../escape": b"x",
            "a/1/model.onnx": b"A",
            ".hidden/1/model.onnx": b"H",
            "d/": b"",  # a folder marker
            "d/2/": b"",
        },
    )
    mirror = clouds.mirror(f"s3://{moto.host_port}/{BUCKET}/{prefix}")
    await mirror.sync()
    assert _files(mirror) == {"a/1/model.onnx": b"A"}
    assert (mirror.root / "d" / "2").is_dir()
    assert not (mirror.root.parent / "escape").exists()


async def test_a_failed_sync_names_the_location_and_keeps_the_copy(
    moto: MotoServer, clouds: CloudRepositories, prefix: str
) -> None:
    _put(moto, prefix, {"a/1/model.onnx": b"A"})
    text = f"s3://{moto.host_port}/{BUCKET}/{prefix}"
    mirror = clouds.mirror(text)
    await mirror.sync()
    moto.client().delete_object(Bucket=BUCKET, Key=f"{prefix}/a/1/model.onnx")
    with pytest.raises(StorageUnavailableError, match="holds no objects") as caught:
        await mirror.sync()
    assert text in str(caught.value)
    assert _files(mirror) == {"a/1/model.onnx": b"A"}


@pytest.mark.parametrize(
    ("location", "env", "words"),
    [
        (
            "s3://{host}/convoy-no-such-bucket/m",
            {},
            "bucket 'convoy-no-such-bucket' does not exist",
        ),
        (
            "s3://{host}/" + BUCKET,
            {"AWS_ACCESS_KEY_ID": "AKIAWRONG", "AWS_SECRET_ACCESS_KEY": "wrong"},
            "the credentials were refused \\(InvalidAccessKeyId",
        ),
        ("s3://127.0.0.1:{dead}/" + BUCKET, {}, "cannot use http://127.0.0.1:"),
    ],
    ids=["missing-bucket", "bad-credentials", "dead-endpoint"],
)
async def test_unreadable_repositories_are_clear_errors(
    moto: MotoServer, location: str, env: dict[str, str], words: str
) -> None:
    text = location.format(host=moto.host_port, dead=free_port())
    clouds = CloudRepositories({**moto.env(), **env})
    try:
        mirror = clouds.mirror(text)
        with pytest.raises(StorageUnavailableError, match=words) as caught:
            await mirror.sync()
        assert f"model repository '{text}' is unavailable" in str(caught.value)
    finally:
        clouds.close()


async def test_copies_live_in_the_mount_directory_until_closed(
    moto: MotoServer, tmp_path: Path, prefix: str
) -> None:
    _put(moto, prefix, {"a/1/model.onnx": b"A"})
    mount = tmp_path / "mount"
    mount.mkdir()
    clouds = CloudRepositories({**moto.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(mount)})
    mirror = clouds.mirror(f"s3://{moto.host_port}/{BUCKET}/{prefix}")
    await mirror.sync()
    assert mount in mirror.root.parents
    clouds.close()
    assert list(mount.iterdir()) == []


async def test_the_https_endpoint_form_verifies_the_server(tmp_path: Path) -> None:
    """s3://https://host:port/bucket/path: TLS to a private endpoint, trusting AWS_CA_BUNDLE."""
    moto = MotoServer(tmp_path / "moto.log", tls=True).start()
    try:
        moto.client().create_bucket(Bucket=BUCKET)
        _put(moto, "models", {"a/1/model.onnx": b"A"})
        text = f"s3://https://{moto.host_port}/{BUCKET}/models"
        clouds = CloudRepositories(moto.env())  # boto3 reads AWS_CA_BUNDLE from the process env
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AWS_CA_BUNDLE", str(moto.ca_bundle))
            mirror = clouds.mirror(text)
            await mirror.sync()
        assert _files(mirror) == {"a/1/model.onnx": b"A"}
        clouds.close()
        plain = CloudRepositories(moto.env())
        mirror = plain.mirror(f"s3://{moto.host_port}/{BUCKET}/models")  # http to a TLS port
        with pytest.raises(
            StorageUnavailableError, match=f"model repository 's3://{moto.host_port}"
        ):
            await mirror.sync()
        plain.close()
    finally:
        moto.stop()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsEmulator]:
    server = GcsEmulator(tmp_path_factory.mktemp("gcs") / "gcs.log").start()
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()


async def test_a_gcs_repository_syncs_against_an_emulator(gcs: GcsEmulator, tmp_path: Path) -> None:
    """gs:// through gcloud-rest-storage; an object written again has a new generation."""
    gcs.put(BUCKET, "models/a/1/model.onnx", b"A")
    gcs.put(BUCKET, "models/b/1/model.onnx", b"B")
    clouds = CloudRepositories(gcs.env())
    try:
        mirror = clouds.mirror(f"gs://{BUCKET}/models")
        await mirror.sync()
        assert _files(mirror) == {"a/1/model.onnx": b"A", "b/1/model.onnx": b"B"}
        before = _mtimes(mirror)
        gcs.put(BUCKET, "models/a/1/model.onnx", b"A2")
        gcs.delete(BUCKET, "models/b/1/model.onnx")
        await mirror.sync()
        assert _files(mirror) == {"a/1/model.onnx": b"A2"}
        assert _mtimes(mirror)["a/1/model.onnx"] != before["a/1/model.onnx"]
        missing = clouds.mirror("gs://convoy-no-such-bucket/models")
        with pytest.raises(
            StorageUnavailableError, match="bucket 'convoy-no-such-bucket'"
        ) as caught:
            await missing.sync()
        assert "model repository 'gs://convoy-no-such-bucket/models' is unavailable" in str(
            caught.value
        )
    finally:
        clouds.close()


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("dead-endpoint", "Connection refused"),
        ("missing-file", "the credentials were refused \\(FileNotFoundError"),
        # gcloud-rest-auth tries a token five times, backing off: this case takes seconds.
        ("refused-grant", "the credentials were refused \\(400 Client Error.*invalid_grant"),
    ],
    ids=["dead-endpoint", "missing-file", "refused-grant"],
)
async def test_unusable_gcs_endpoints_and_credentials_are_clear_errors(
    case: str, words: str, tmp_path: Path
) -> None:
    """No request reaches Google: the endpoint is a dead local port, and the credentials fail
    before any storage request (a missing file; a token endpoint on 127.0.0.1 that refuses)."""
    text = f"gs://{BUCKET}/models"
    key = tmp_path / "user.json"
    with refusing_token_endpoint() as token_uri:
        user = {"client_id": "c", "client_secret": "s", "refresh_token": "r"}
        key.write_text(json.dumps({"type": "authorized_user", "token_uri": token_uri, **user}))
        env = {
            "dead-endpoint": {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{free_port()}"},
            "missing-file": {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json")},
            "refused-grant": {"GOOGLE_APPLICATION_CREDENTIALS": str(key)},
        }[case]
        clouds = CloudRepositories(env)
        try:
            with pytest.raises(StorageUnavailableError, match=words) as caught:
                await clouds.mirror(text).sync()
            assert f"model repository '{text}' is unavailable" in str(caught.value)
        finally:
            clouds.close()


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    if azurite_binary() is None:
        pytest.skip("azurite-blob is not installed (npm install -g azurite)")
    server = Azurite(tmp_path_factory.mktemp("azurite") / "azurite.log").start()
    try:
        server.client().create_container(BUCKET)
        yield server
    finally:
        server.stop()


async def test_an_azure_repository_syncs_against_azurite(azurite: Azurite) -> None:
    """as:// through azure-storage-blob, with AZURE_STORAGE_CONNECTION_STRING naming the
    endpoint; Azurite checks the shared key's signatures."""
    container = azurite.client().get_container_client(BUCKET)
    container.upload_blob("models/a/1/model.onnx", b"A")
    container.upload_blob("models/b/1/model.onnx", b"B")
    clouds = CloudRepositories(azurite.env())
    try:
        mirror = clouds.mirror(f"as://devstoreaccount1/{BUCKET}/models")
        await mirror.sync()
        assert _files(mirror) == {"a/1/model.onnx": b"A", "b/1/model.onnx": b"B"}
        before = _mtimes(mirror)
        container.upload_blob("models/a/1/model.onnx", b"A2", overwrite=True)
        container.delete_blob("models/b/1/model.onnx")
        await mirror.sync()
        assert _files(mirror) == {"a/1/model.onnx": b"A2"}
        assert _mtimes(mirror)["a/1/model.onnx"] != before["a/1/model.onnx"]
        missing = clouds.mirror("as://devstoreaccount1/convoy-no-such-container/models")
        with pytest.raises(StorageUnavailableError, match="container 'convoy-no-such-container'"):
            await missing.sync()
    finally:
        clouds.close()
    wrong = CloudRepositories(
        {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string(key="d3Jvbmc=")}
    )
    try:
        text = f"as://devstoreaccount1/{BUCKET}/models"
        with pytest.raises(StorageUnavailableError, match="the credentials were refused") as caught:
            await wrong.mirror(text).sync()
        assert f"model repository '{text}' is unavailable" in str(caught.value)
    finally:
        wrong.close()
