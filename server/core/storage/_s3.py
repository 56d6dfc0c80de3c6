"""`S3Store`: an S3 bucket (AWS, or a private S3-compatible endpoint) through boto3."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server.core.storage._credentials import S3Credential
from server.core.storage._library import require
from server.core.storage._locations import CloudLocation
from server.core.storage._mirror import ObjectInfo
from server.core.storage.errors import StorageUnavailableError

# Error codes that mean the credentials, not the bucket, are wrong.
_CREDENTIAL_CODES = frozenset(
    {
        "AccessDenied",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "403",
    }
)


class S3Store:
    """Lists and downloads the objects below one s3:// location (one sync at a time)."""

    def __init__(self, location: CloudLocation, credential: S3Credential) -> None:
        require("boto3", "s3")
        self._location = location
        self._credential = credential
        self._client: Any = None  # made on first use, in the sync thread

    @property
    def location(self) -> str:
        return self._location.text

    def list(self) -> list[ObjectInfo]:
        bucket, prefix = self._location.bucket, self._location.prefix
        found: list[ObjectInfo] = []
        with _errors(self._location):
            pages = (
                self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    tag = f"{item['ETag']} {item['LastModified'].isoformat()}"
                    found.append(ObjectInfo(item["Key"][len(prefix) :], int(item["Size"]), tag))
        return found

    def download(self, key: str, target: Path) -> None:
        with _errors(self._location):
            self._s3().download_file(
                self._location.bucket, self._location.prefix + key, str(target)
            )

    def _s3(self) -> Any:
        if self._client is None:
            self._client = _client(self._location, self._credential)
        return self._client


@contextlib.contextmanager
def _errors(location: CloudLocation) -> Iterator[None]:
    """boto3's errors as StorageUnavailableError, naming the location and the cause."""
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        detail = str(error.response.get("Error", {}).get("Message", "")) or str(error)
        if code == "NoSuchBucket":
            reason = f"bucket '{location.bucket}' does not exist ({code}: {detail})"
        elif code in _CREDENTIAL_CODES:
            reason = (
                f"the credentials were refused ({code}: {detail}); check AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or TRITON_CLOUD_CREDENTIAL_PATH"
            )
        else:
            reason = f"{code}: {detail}"
        raise StorageUnavailableError(f"{where}: {reason}") from error
    except BotoCoreError as error:  # no connection, no credentials at all, ...
        raise StorageUnavailableError(
            f"{where}: cannot use {location.endpoint or 'AWS S3'}: {error}"
        ) from error


def _client(location: CloudLocation, credential: S3Credential) -> Any:
    """Keys first, then a profile, then boto3's default chain (as Triton's S3 client); a private
    endpoint is addressed by path, as Triton does."""
    import boto3
    from botocore.config import Config

    if credential.key_id and credential.secret_key:
        session = boto3.session.Session(
            aws_access_key_id=credential.key_id,
            aws_secret_access_key=credential.secret_key,
            aws_session_token=credential.session_token or None,
            region_name=credential.region or None,
        )
    elif credential.profile:
        session = boto3.session.Session(profile_name=credential.profile)
    else:
        session = boto3.session.Session()
    config = Config(
        connect_timeout=5,
        read_timeout=60,
        retries={"max_attempts": 3, "mode": "standard"},
        s3={"addressing_style": "path"} if location.endpoint else {},
    )
    return session.client("s3", endpoint_url=location.endpoint, config=config)
