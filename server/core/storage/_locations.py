"""Triton's cloud repository URLs: `s3://[http(s)://host:port/]bucket/path`, `gs://bucket/path`
and `as://account/container/path`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from server.core.storage.errors import LocationError

SCHEMES = ("s3", "gs", "as")
# A first S3 segment of host:port is a private endpoint (a bucket name never holds a colon).
_ENDPOINT = re.compile(r"[0-9A-Za-z.\-]+:[0-9]+")
_AZURE_HOST_SUFFIX = ".blob.core.windows.net"


@dataclass(frozen=True, slots=True)
class CloudLocation:
    """One cloud model repository, parsed."""

    text: str  # as given: named in messages and matched against credential file entries
    scheme: str  # "s3", "gs" or "as"
    bucket: str  # the bucket (s3, gs) or the container (as)
    prefix: str  # the repository's object path in the bucket: "" or ending in "/"
    endpoint: str | None = None  # s3: "http(s)://host[:port]" of a private instance; None: AWS
    account: str = ""  # as: the storage account the URL names


def is_cloud(text: str) -> bool:
    """Whether a --model-repository value is a cloud location rather than a local directory."""
    scheme, separator, _ = text.partition("://")
    return bool(separator) and scheme in SCHEMES


def parse_location(text: str) -> CloudLocation:
    """The parts of a cloud repository URL; a malformed one raises LocationError."""
    scheme, separator, rest = text.partition("://")
    if scheme not in SCHEMES or not separator:
        raise LocationError(f"model repository '{text}' is not an s3://, gs:// or as:// location")
    protocol = ""
    if scheme == "s3":
        for candidate in ("https://", "http://"):
            if rest.startswith(candidate):
                protocol, rest = candidate, rest[len(candidate) :]
    if scheme == "as":
        rest = rest.partition("?")[0]  # Triton ignores a query part (a SAS token is not used)
    parts = [part for part in rest.split("/") if part]  # repeated slashes collapse, as in Triton
    endpoint = None
    if scheme == "s3" and parts and (protocol or _ENDPOINT.fullmatch(parts[0])):
        endpoint = (protocol or "http://") + parts.pop(0)
    account = ""
    if scheme == "as":
        if len(parts) < 2:
            raise LocationError(
                f"model repository '{text}': expected as://account/container[/path]"
            )
        account = parts.pop(0).removesuffix(_AZURE_HOST_SUFFIX)
    if not parts:
        raise LocationError(f"model repository '{text}': no bucket name found")
    bucket, path = parts[0], parts[1:]
    return CloudLocation(
        text=text,
        scheme=scheme,
        bucket=bucket,
        prefix="".join(f"{part}/" for part in path),
        endpoint=endpoint,
        account=account,
    )
