"""Which credentials a cloud repository uses: Triton's variables, or the longest matching entry
of the TRITON_CLOUD_CREDENTIAL_PATH file (server.core.storage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.core.storage import (
    CREDENTIAL_FILE_VARIABLE,
    AzureCredential,
    GcsCredential,
    LocationError,
    S3Credential,
    credential_for,
    parse_location,
)

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIA-ENV",
    "AWS_SECRET_ACCESS_KEY": "secret-env",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "AWS_SESSION_TOKEN": "token-env",
    "AWS_PROFILE": "prof",
}


def test_s3_reads_the_aws_variables() -> None:
    assert credential_for(parse_location("s3://b/m"), AWS_ENV) == S3Credential(
        "AKIA-ENV", "secret-env", "eu-west-1", "token-env", "prof"
    )
    assert credential_for(parse_location("s3://b/m"), {}) == S3Credential()


def test_gcs_and_azure_read_their_variables() -> None:
    env = {
        "GOOGLE_APPLICATION_CREDENTIALS": "/keys/gcs.json",
        "AZURE_STORAGE_ACCOUNT": "acct",
        "AZURE_STORAGE_KEY": "azkey",
        "AZURE_STORAGE_AUTH_TYPE": "managed_identity",
        "AZURE_STORAGE_CLIENT_ID": "client",
    }
    assert credential_for(parse_location("gs://b"), env) == GcsCredential("/keys/gcs.json")
    assert credential_for(parse_location("as://a/c"), env) == AzureCredential(
        "acct", "azkey", "managed_identity", "client"
    )


def test_secrets_stay_out_of_the_repr() -> None:
    text = repr(credential_for(parse_location("s3://b"), AWS_ENV))
    assert "secret-env" not in text and "token-env" not in text and "AKIA-ENV" in text
    assert "azkey" not in repr(AzureCredential(key="azkey"))


def _file(tmp_path: Path, content: object) -> dict[str, str]:
    path = tmp_path / "cloud_credential.json"
    path.write_text(json.dumps(content))
    return {CREDENTIAL_FILE_VARIABLE: str(path), **AWS_ENV}  # the file wins over the variables


TRITON_EXAMPLE = {  # the shape of Triton's documented example
    "gs": {"": "PATH_1", "gs://gcs-bucket-002": "PATH_2"},
    "s3": {
        "": {
            "secret_key": "S1",
            "key_id": "K1",
            "region": "R1",
            "session_token": "",
            "profile": "",
        },
        "s3://s3-bucket-002": {
            "secret_key": "S2",
            "key_id": "K2",
            "region": "R2",
            "session_token": "T2",
            "profile": "P2",
        },
        "s3://https://host:443/my-bucket": {"secret_key": "S3", "key_id": "K3", "region": "R3"},
    },
    "as": {
        "": {"account_str": "A1", "account_key": "AK1"},
        "as://Account-002/Container": {"account_str": "", "account_key": ""},
        "as://Account-MI/Container": {
            "account_str": "MI",
            "auth_type": "managed_identity",
            "client_id": "",
        },
    },
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://any-bucket/models", S3Credential("K1", "S1", "R1")),
        ("s3://s3-bucket-002/models", S3Credential("K2", "S2", "R2", "T2", "P2")),
        ("s3://s3-bucket-0021/models", S3Credential("K2", "S2", "R2", "T2", "P2")),  # a prefix
        ("s3://https://host:443/my-bucket/m", S3Credential("K3", "S3", "R3")),
        ("gs://gcs-bucket-002/model_repository", GcsCredential("PATH_2")),
        ("gs://any-other-gcs-bucket", GcsCredential("PATH_1")),
        ("as://Account-002/Container/m", AzureCredential()),
        ("as://Account-MI/Container", AzureCredential("MI", "", "managed_identity", "")),
        ("as://other/c", AzureCredential("A1", "AK1")),
    ],
)
def test_the_longest_matching_entry_wins(
    tmp_path: Path, text: str, expected: S3Credential | GcsCredential | AzureCredential
) -> None:
    assert credential_for(parse_location(text), _file(tmp_path, TRITON_EXAMPLE)) == expected


def test_no_matching_entry_is_an_error_naming_the_location(tmp_path: Path) -> None:
    env = _file(tmp_path, {"s3": {"s3://other": {"key_id": "K", "secret_key": "S"}}})
    with pytest.raises(LocationError, match="no 's3' credential matching 's3://bucket/m'"):
        credential_for(parse_location("s3://bucket/m"), env)
    with pytest.raises(LocationError, match="no 'gs' credential"):  # no section at all
        credential_for(parse_location("gs://bucket"), env)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "cannot read"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"s3": ["x"]}', "must be an object of credentials"),
        ('{"s3": {"": {"key_id": 7}}}', "an object of strings"),
        ('{"gs": {"": {"path": "x"}}}', "path of a JSON credential file"),
    ],
)
def test_a_bad_credential_file_is_a_clear_error(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "creds.json"
    path.write_text(content)
    scheme = "gs" if "gs" in content else "s3"
    with pytest.raises(LocationError, match=words) as caught:
        credential_for(parse_location(f"{scheme}://bucket"), {CREDENTIAL_FILE_VARIABLE: str(path)})
    assert str(path) in str(caught.value)


def test_a_missing_credential_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(LocationError, match=f"cannot read the .*'{missing}'"):
        credential_for(parse_location("s3://b"), {CREDENTIAL_FILE_VARIABLE: str(missing)})
