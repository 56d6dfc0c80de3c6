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

    def __init__(
        self, location: CloudLocation, credential: AzureCredential, connection_string: str = ""
    ) -> None:
        require("azure.storage.blob", "azure")
        if credential.auth_type in ("managed_identity", "default") and not connection_string:
            require("azure.identity", "azure")
        self._location = location
        self._credential = credential
        # AZURE_STORAGE_CONNECTION_STRING: the account, key and blob endpoint in one (Azure's
        # tools read it; it reaches a private endpoint such as Azurite); it wins when set.
        self._connection_string = connection_string
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
            if self._connection_string:
                from azure.storage.blob import BlobServiceClient

                service = BlobServiceClient.from_connection_string(
                    self._connection_string, **_options()
                )
                self._container = service.get_container_client(self._location.bucket)
            else:
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
    service = BlobServiceClient(account_url(location, credential), credential=token, **_options())
    return service.get_container_client(location.bucket)


def _options() -> dict[str, Any]:
    """Bounded waits: the SDK's own retries back off from 15 s, minutes on a dead endpoint."""
    from azure.storage.blob import ExponentialRetry

    retry = ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=2)
    return {"retry_policy": retry, "connection_timeout": 5, "read_timeout": 60}


@contextlib.contextmanager
def _errors(location: CloudLocation) -> Iterator[None]:
    """The client's errors as StorageUnavailableError, naming the location and the cause."""
    from azure.core.exceptions import (
        AzureError,
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
    )

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except ResourceNotFoundError as error:
        raise StorageUnavailableError(
            f"{where}: container '{location.bucket}' or a blob in it does not exist "
            f"({_first_line(error)})"
        ) from error
    except (ClientAuthenticationError, HttpResponseError) as error:
        if not isinstance(error, ClientAuthenticationError) and error.status_code not in (401, 403):
            raise StorageUnavailableError(f"{where}: {_first_line(error)}") from error
        raise StorageUnavailableError(
            f"{where}: the credentials were refused ({_first_line(error)}); check "
            "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY (or AZURE_STORAGE_AUTH_TYPE, "
            "AZURE_STORAGE_CONNECTION_STRING), or TRITON_CLOUD_CREDENTIAL_PATH"
        ) from error
    except AzureError as error:  # no connection, and the rest
        raise StorageUnavailableError(f"{where}: {_first_line(error)}") from error


def _first_line(error: Exception) -> str:
    """The service's message without the request id and time lines it appends."""
    return str(error).partition("\n")[0]
