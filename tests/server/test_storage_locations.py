"""Triton's cloud repository URL forms, parsed (server.core.storage)."""

from __future__ import annotations

import pytest

from server.core.storage import CloudLocation, LocationError, is_cloud, parse_location


@pytest.mark.parametrize(
    ("text", "bucket", "prefix", "endpoint"),
    [
        ("s3://bucket", "bucket", "", None),
        ("s3://bucket/path/to/models", "bucket", "path/to/models/", None),
        ("s3://bucket//path///models/", "bucket", "path/models/", None),  # slashes collapse
        ("s3://127.0.0.1:9000/bucket/models", "bucket", "models/", "http://127.0.0.1:9000"),
        ("s3://minio.local:80/bucket", "bucket", "", "http://minio.local:80"),
        ("s3://http://host:9000/bucket/m", "bucket", "m/", "http://host:9000"),
        (
            "s3://https://ns.compat.objectstorage.eu-1.oraclecloud.com:443/repo",
            "repo",
            "",
            "https://ns.compat.objectstorage.eu-1.oraclecloud.com:443",
        ),
        ("s3://https://s3.example.com/bucket/m", "bucket", "m/", "https://s3.example.com"),
        ("s3://my.bucket.name/models", "my.bucket.name", "models/", None),  # dots, no port
    ],
)
def test_s3_forms(text: str, bucket: str, prefix: str, endpoint: str | None) -> None:
    assert parse_location(text) == CloudLocation(text, "s3", bucket, prefix, endpoint)


def test_gcs_form() -> None:
    assert parse_location("gs://bucket/path/to/repo") == CloudLocation(
        "gs://bucket/path/to/repo", "gs", "bucket", "path/to/repo/"
    )
    assert parse_location("gs://bucket").prefix == ""


@pytest.mark.parametrize(
    ("text", "account", "container", "prefix"),
    [
        ("as://account/container", "account", "container", ""),
        ("as://account/container/path/to/repo", "account", "container", "path/to/repo/"),
        ("as://acct.blob.core.windows.net/c/repo", "acct", "c", "repo/"),
        ("as://account/container/repo?sv=2024", "account", "container", "repo/"),
    ],
)
def test_azure_forms(text: str, account: str, container: str, prefix: str) -> None:
    location = parse_location(text)
    assert (location.scheme, location.account, location.bucket, location.prefix) == (
        "as",
        account,
        container,
        prefix,
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("s3://", "no bucket name"),
        ("s3:///", "no bucket name"),
        ("s3://127.0.0.1:9000", "no bucket name"),
        ("s3://https://host:443/", "no bucket name"),
        ("gs://", "no bucket name"),
        ("as://account", "expected as://account/container"),
        ("ftp://host/path", "not an s3://, gs:// or as:// location"),
    ],
)
def test_malformed_locations_are_named_in_the_error(text: str, words: str) -> None:
    with pytest.raises(LocationError, match=words) as caught:
        parse_location(text)
    assert text in str(caught.value)


@pytest.mark.parametrize(
    ("text", "cloud"),
    [
        ("s3://bucket", True),
        ("gs://bucket/x", True),
        ("as://a/c", True),
        ("/models", False),
        ("models", False),
        ("s3:/bucket", False),  # what a Path makes of s3://bucket: a local path
        ("http://host/models", False),
    ],
)
def test_cloud_locations_are_told_from_directories(text: str, cloud: bool) -> None:
    assert is_cloud(text) is cloud
