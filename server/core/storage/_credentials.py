"""Which credentials a cloud repository uses: Triton's environment variables, or the entry of
its `TRITON_CLOUD_CREDENTIAL_PATH` JSON file whose name is the longest prefix of the location."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from server.core.storage._locations import CloudLocation
from server.core.storage.errors import LocationError

CREDENTIAL_FILE_VARIABLE = "TRITON_CLOUD_CREDENTIAL_PATH"


@dataclass(frozen=True, slots=True)
class S3Credential:
    """Empty strings are unset. With neither keys nor a profile, boto3's default chain applies
    (its config files, then the instance's role)."""

    key_id: str = ""  # AWS_ACCESS_KEY_ID
    secret_key: str = field(default="", repr=False)  # AWS_SECRET_ACCESS_KEY
    region: str = ""  # AWS_DEFAULT_REGION
    session_token: str = field(default="", repr=False)  # AWS_SESSION_TOKEN
    profile: str = ""  # AWS_PROFILE: used when there are no keys


@dataclass(frozen=True, slots=True)
class GcsCredential:
    """A JSON credential file (authorized user or service account); "" is Google's default
    chain (the attached service account), else anonymous access."""

    path: str = ""  # GOOGLE_APPLICATION_CREDENTIALS


@dataclass(frozen=True, slots=True)
class AzureCredential:
    """Shared key by default; `auth_type` "managed_identity" or "default" uses Azure Identity;
    with neither a key nor an auth type the access is anonymous."""

    account: str = ""  # AZURE_STORAGE_ACCOUNT; "" is the account the URL names
    key: str = field(default="", repr=False)  # AZURE_STORAGE_KEY
    auth_type: str = ""  # AZURE_STORAGE_AUTH_TYPE: "", "key", "managed_identity" or "default"
    client_id: str = ""  # AZURE_STORAGE_CLIENT_ID: a user-assigned managed identity


Credential = S3Credential | GcsCredential | AzureCredential


def credential_for(location: CloudLocation, env: Mapping[str, str]) -> Credential:
    """The location's credentials: from the credential file when the variable names one (an
    unreadable file, or one with no entry for the location, raises LocationError), else from
    the environment."""
    path = env.get(CREDENTIAL_FILE_VARIABLE)
    if path is None:
        return _from_env(location.scheme, env)
    entries = _read_file(path).get(location.scheme, {})
    if not isinstance(entries, dict):
        raise LocationError(
            f"{CREDENTIAL_FILE_VARIABLE} file '{path}': '{location.scheme}' "
            "must be an object of credentials by location"
        )
    names = [name for name in entries if location.text.startswith(name)]
    if not names:
        raise LocationError(
            f"{CREDENTIAL_FILE_VARIABLE} file '{path}' has no '{location.scheme}' credential "
            f"matching '{location.text}'"
        )
    entry = entries[max(names, key=len)]
    if location.scheme == "gs":
        if not isinstance(entry, str):
            raise LocationError(
                f"{CREDENTIAL_FILE_VARIABLE} file '{path}': a 'gs' credential "
                "is the path of a JSON credential file"
            )
        return GcsCredential(entry)
    if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
        raise LocationError(
            f"{CREDENTIAL_FILE_VARIABLE} file '{path}': an '{location.scheme}' "
            "credential is an object of strings"
        )
    if location.scheme == "s3":
        return S3Credential(
            key_id=entry.get("key_id", ""),
            secret_key=entry.get("secret_key", ""),
            region=entry.get("region", ""),
            session_token=entry.get("session_token", ""),
            profile=entry.get("profile", ""),
        )
    return AzureCredential(
        account=entry.get("account_str", ""),
        key=entry.get("account_key", ""),
        auth_type=entry.get("auth_type", ""),
        client_id=entry.get("client_id", ""),
    )


def _from_env(scheme: str, env: Mapping[str, str]) -> Credential:
    if scheme == "s3":
        return S3Credential(
            key_id=env.get("AWS_ACCESS_KEY_ID", ""),
            secret_key=env.get("AWS_SECRET_ACCESS_KEY", ""),
            region=env.get("AWS_DEFAULT_REGION", ""),
            session_token=env.get("AWS_SESSION_TOKEN", ""),
            profile=env.get("AWS_PROFILE", ""),
        )
    if scheme == "gs":
        return GcsCredential(env.get("GOOGLE_APPLICATION_CREDENTIALS", ""))
    return AzureCredential(
        account=env.get("AZURE_STORAGE_ACCOUNT", ""),
        key=env.get("AZURE_STORAGE_KEY", ""),
        auth_type=env.get("AZURE_STORAGE_AUTH_TYPE", ""),
        client_id=env.get("AZURE_STORAGE_CLIENT_ID", ""),
    )


def _read_file(path: str) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as file:
            content = json.load(file)
    except (OSError, ValueError) as exc:
        raise LocationError(
            f"cannot read the {CREDENTIAL_FILE_VARIABLE} file '{path}': {exc}"
        ) from exc
    if not isinstance(content, dict):
        raise LocationError(f"{CREDENTIAL_FILE_VARIABLE} file '{path}' must hold a JSON object")
    return content
