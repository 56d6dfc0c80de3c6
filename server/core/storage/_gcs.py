"""`GcsStore`: a Google Cloud Storage bucket through gcloud-rest-storage (Google's JSON API over
requests; unlike google-cloud-storage it does not bring proto-plus, whose top-level `proto`
package would shadow Convoy's)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from server.core.storage._credentials import GcsCredential
from server.core.storage._library import require
from server.core.storage._locations import CloudLocation
from server.core.storage._mirror import ObjectInfo
from server.core.storage.errors import StorageUnavailableError

if TYPE_CHECKING:
    import requests
    from gcloud.rest.auth import Token
    from gcloud.rest.storage import Storage

_API_ROOT = "https://www.googleapis.com"
_READ_ONLY = "https://www.googleapis.com/auth/devstorage.read_only"
_METADATA_TIMEOUT_S = 3.0  # google-auth's wait for the metadata server before going anonymous
_CHUNK_BYTES = 1 << 20  # a download is written as it arrives, never held whole in memory
_CHECK_CREDENTIALS = "check GOOGLE_APPLICATION_CREDENTIALS or TRITON_CLOUD_CREDENTIAL_PATH"


class GcsStore:
    """Lists and downloads the objects below one gs:// location (one sync at a time)."""

    def __init__(
        self, location: CloudLocation, credential: GcsCredential, emulator: str = ""
    ) -> None:
        require("gcloud.rest.storage", "gcs")
        self._location = location
        self._credential = credential
        self._emulator = emulator  # STORAGE_EMULATOR_HOST: an emulator's URL, reached anonymously
        self._client: Storage | None = None  # made on first use, in the sync thread
        self._token: Token | None = None  # None: the requests carry no credentials

    @property
    def location(self) -> str:
        return self._location.text

    def list(self) -> list[ObjectInfo]:
        bucket, prefix = self._location.bucket, self._location.prefix
        found: list[ObjectInfo] = []
        params = {"prefix": prefix}
        with _errors(self._location):
            client = self._storage()
            while True:
                page = client.list_objects(bucket, params=params)
                for item in page.get("items", ()):
                    key, size = item["name"][len(prefix) :], int(item.get("size", 0))
                    found.append(ObjectInfo(key, size, str(item["generation"])))
                if not page.get("nextPageToken"):
                    return found
                params["pageToken"] = page["nextPageToken"]

    def download(self, key: str, target: Path) -> None:
        location = self._location
        with _errors(location):
            stream = self._storage().download_stream(location.bucket, location.prefix + key)
            with stream, target.open("wb") as file:
                while chunk := stream.read(_CHUNK_BYTES):
                    file.write(chunk)

    def _storage(self) -> Storage:
        """The client, with a current access token (fetched here, so that a refused credential
        is told apart from a missing bucket; the client then reads it from the token's cache)."""
        with _credential_errors(self._location):
            client, token = self._client, self._token
            if client is None:
                client, token = _client(self._credential, self._emulator)
                self._client, self._token = client, token
            if token is not None:
                token.get()
        return client


def _client(credential: GcsCredential, emulator: str) -> tuple[Storage, Token | None]:
    """The credential file, else Google's default credentials (the gcloud CLI's file, then the
    metadata server of the machine), else anonymous (Triton's order); an emulator is reached
    anonymously. Always an explicit endpoint, so the process's own STORAGE_EMULATOR_HOST is not
    read behind the environment Convoy was given."""
    import requests
    from gcloud.rest.auth import Token
    from gcloud.rest.auth.token import Type
    from gcloud.rest.storage import Storage

    if emulator:
        root = emulator if emulator.startswith("http") else f"http://{emulator}"
        return _anonymous(root, None), None
    token = Token(service_file=credential.path or None, scopes=[_READ_ONLY])
    if token.token_type is Type.GCE_METADATA and not _metadata_server_answers():
        return _anonymous(_API_ROOT, requests.Session()), None
    return Storage(token=token, api_root=_API_ROOT, api_is_dev=False), token


def _anonymous(api_root: str, session: requests.Session | None) -> Storage:
    """A client that sends no Authorization header: the library's emulator ("dev") mode, which
    never asks its token (made from an empty credential, so no file or variable is read). Dev
    mode turns TLS verification off in a session it makes; a session given keeps it on."""
    from gcloud.rest.auth import Token
    from gcloud.rest.storage import Storage

    unused = Token(service_file=io.StringIO("{}"))
    return Storage(token=unused, session=session, api_root=api_root, api_is_dev=True)


def _metadata_server_answers() -> bool:
    """Whether this machine has Google's metadata server (the last link of the default chain),
    as google-auth checks it: its flavour header, within a few seconds."""
    import requests
    from gcloud.rest.auth.token import GCE_METADATA_BASE, GCE_METADATA_HEADERS

    try:
        with requests.get(
            f"{GCE_METADATA_BASE}/", headers=GCE_METADATA_HEADERS, timeout=_METADATA_TIMEOUT_S
        ) as response:
            return bool(response.headers.get("Metadata-Flavor") == "Google")
    except requests.RequestException:
        return False


@contextlib.contextmanager
def _credential_errors(location: CloudLocation) -> Iterator[None]:
    """Reading the credential file and fetching an access token: their errors as
    StorageUnavailableError, naming the location."""
    import requests
    from jwt import PyJWTError

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except requests.HTTPError as error:  # the token endpoint said no
        raise StorageUnavailableError(
            f"{where}: the credentials were refused ({error}); {_CHECK_CREDENTIALS}"
        ) from error
    except requests.RequestException as error:
        raise StorageUnavailableError(f"{where}: cannot fetch an access token: {error}") from error
    except (OSError, ValueError, KeyError, PyJWTError) as error:  # an unreadable credential file
        raise StorageUnavailableError(
            f"{where}: the credentials were refused ({type(error).__name__}: {error}); "
            f"{_CHECK_CREDENTIALS}"
        ) from error


@contextlib.contextmanager
def _errors(location: CloudLocation) -> Iterator[None]:
    """The JSON API's answers as StorageUnavailableError, naming the location and the cause."""
    import requests

    where = f"model repository '{location.text}' is unavailable"
    try:
        yield
    except requests.HTTPError as error:
        status = 0 if error.response is None else error.response.status_code
        if status == 404:
            raise StorageUnavailableError(
                f"{where}: bucket '{location.bucket}' or an object in it does not exist: {error}"
            ) from error
        if status in (401, 403):
            raise StorageUnavailableError(
                f"{where}: the credentials were refused ({error}); {_CHECK_CREDENTIALS}"
            ) from error
        raise StorageUnavailableError(f"{where}: {error}") from error
    except requests.RequestException as error:
        raise StorageUnavailableError(f"{where}: {error}") from error
