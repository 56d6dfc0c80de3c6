"""`AzureStore`: an Azure Storage blob container through azure-storage-blob."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server.core.storage._credentials import AzureCredential
from server.core.storage._library import require
from server.core.storage._locations import CloudLocation
from server.core.storage._mirror import ObjectInfo
from server.core.storage.errors import StorageUnavailableError


class AzureStore:
    """Lists and downloads the blobs below one as:// location (one sync at a time)."""

    def __init__(self, location: CloudLocation, credential: AzureCredential) -> None:
        require("azure.storage.blob", "azure")
        if credential.auth_type in ("managed_identity", "default"):
            require("azure.identity", "azure")
        self._location = location
        self._credential = credential
        self._container: Any = None  # made on first use, in the sync thread

    @property
    def location(self) -> str:
        return self._location.text

    def list(self) -> list[ObjectInfo]:
        prefix = self._location.prefix
        with _errors(self._location):
            blobs = self._blobs().list_blobs(name_starts_with=prefix or None)
            return [
                ObjectInfo(
                    blob.name[len(prefix) :],
                    int(blob.size),
                    f"{blob.etag} {blob.last_modified.isoformat()}",
                )
                for blob in blobs
            ]

    def download(self, key: str, target: Path) -> None:
        with _errors(self._location), target.open("wb") as file:
            self._blobs().download_blob(self._location.prefix + key).readinto(file)

    def _blobs(self) -> Any:
        if self._container is None:
            self._container = _container(self._location, self._credential)
        return self._container


def account_url(location: CloudLocation, credential: AzureCredential) -> str:
    """The blob service of the credential's account, else of the one the URL names (Triton)."""
    return f"https://{credential.account or location.account}.blob.core.windows.net"


def _container(location: CloudLocation, credential: AzureCredential) -> Any:
    from azure.storage.blob import BlobServiceClient

    token: Any = None  # anonymous access
    if credential.auth_type == "managed_identity":
        from azure.identity import ManagedIdentityCredential

        token = ManagedIdentityCredential(client_id=credential.client_id or None)
    elif credential.auth_type == "default":
        from azure.identity import DefaultAzureCredential

        token = DefaultAzureCredential()
    elif credential.key:
        token = {
            "account_name": credential.account or location.account,
            "account_key": credential.key,
        }
    service = BlobServiceClient(account_url(location, credential), credential=token)
    return service.get_container_client(location.bucket)


@contextlib.contextmanager
def _errors(location: CloudLocation) -> Iterator[None]:
    """The client's errors as StorageUnavailableError, naming the location and the cause."""
    from azure.core.exceptions import (
        AzureError,
        ClientAuthenticationError,
        ResourceNotFoundError,
    )

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except ResourceNotFoundError as error:
        raise StorageUnavailableError(
            f"{where}: container '{location.bucket}' or a blob in it does not exist: {error}"
        ) from error
    except ClientAuthenticationError as error:
        raise StorageUnavailableError(
            f"{where}: the credentials were refused ({error}); check AZURE_STORAGE_ACCOUNT and "
            "AZURE_STORAGE_KEY (or AZURE_STORAGE_AUTH_TYPE), or TRITON_CLOUD_CREDENTIAL_PATH"
        ) from error
    except AzureError as error:
        raise StorageUnavailableError(f"{where}: {error}") from error
