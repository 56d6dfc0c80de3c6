"""`GcsStore`: a Google Cloud Storage bucket through google-cloud-storage."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server.core.storage._credentials import GcsCredential
from server.core.storage._library import require
from server.core.storage._locations import CloudLocation
from server.core.storage._mirror import ObjectInfo
from server.core.storage.errors import StorageUnavailableError

_READ_ONLY = "https://www.googleapis.com/auth/devstorage.read_only"


class GcsStore:
    """Lists and downloads the objects below one gs:// location (one sync at a time)."""

    def __init__(
        self, location: CloudLocation, credential: GcsCredential, emulator: str = ""
    ) -> None:
        require("google.cloud.storage", "gcs")
        self._location = location
        self._credential = credential
        self._emulator = emulator  # STORAGE_EMULATOR_HOST: an emulator's URL, reached anonymously
        self._client: Any = None  # made on first use, in the sync thread

    @property
    def location(self) -> str:
        return self._location.text

    def list(self) -> list[ObjectInfo]:
        prefix = self._location.prefix
        with _errors(self._location):
            blobs = self._gcs().list_blobs(self._location.bucket, prefix=prefix)
            return [
                ObjectInfo(blob.name[len(prefix) :], int(blob.size or 0), f"{blob.generation}")
                for blob in blobs
            ]

    def download(self, key: str, target: Path) -> None:
        with _errors(self._location):
            bucket = self._gcs().bucket(self._location.bucket)
            bucket.blob(self._location.prefix + key).download_to_filename(str(target))

    def _gcs(self) -> Any:
        if self._client is None:
            self._client = _client(self._credential, self._emulator)
        return self._client


def _client(credential: GcsCredential, emulator: str) -> Any:
    """The credential file, else Google's default credentials, else anonymous (Triton's order);
    an emulator is reached anonymously."""
    import google.auth
    from google.auth.credentials import AnonymousCredentials
    from google.auth.exceptions import DefaultCredentialsError
    from google.cloud import storage

    if emulator:
        anonymous: Any = AnonymousCredentials  # untyped where the stubs are missing
        return storage.Client(
            project="convoy",
            credentials=anonymous(),
            client_options={"api_endpoint": emulator},
        )
    if credential.path:
        load: Any = google.auth.load_credentials_from_file  # untyped where the stubs are missing
        found, project = load(credential.path, scopes=[_READ_ONLY])
        return storage.Client(project=project, credentials=found)
    try:
        found, project = google.auth.default(scopes=[_READ_ONLY])
    except DefaultCredentialsError:
        return storage.Client.create_anonymous_client()
    return storage.Client(project=project, credentials=found)


@contextlib.contextmanager
def _errors(location: CloudLocation) -> Iterator[None]:
    """The client's errors as StorageUnavailableError, naming the location and the cause."""
    from google.api_core.exceptions import Forbidden, GoogleAPIError, NotFound, Unauthorized
    from google.auth.exceptions import GoogleAuthError
    from requests import RequestException

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except NotFound as error:
        raise StorageUnavailableError(
            f"{where}: bucket '{location.bucket}' or an object in it does not exist: {error}"
        ) from error
    except (Forbidden, Unauthorized, GoogleAuthError) as error:
        raise StorageUnavailableError(
            f"{where}: the credentials were refused ({error}); check "
            "GOOGLE_APPLICATION_CREDENTIALS or TRITON_CLOUD_CREDENTIAL_PATH"
        ) from error
    except (GoogleAPIError, RequestException) as error:
        raise StorageUnavailableError(f"{where}: {error}") from error
