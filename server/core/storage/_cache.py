"""`CloudRepositories`: the local copies of a server's cloud repositories, each in a temporary
directory (under Triton's `TRITON_*_MOUNT_DIRECTORY` when set) that `close()` removes."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path

from server.core.storage._azure import AzureStore
from server.core.storage._credentials import (
    AzureCredential,
    GcsCredential,
    S3Credential,
    credential_for,
)
from server.core.storage._gcs import GcsStore
from server.core.storage._locations import parse_location
from server.core.storage._mirror import Mirror, ObjectStore
from server.core.storage._s3 import S3Store
from server.core.storage.errors import LocationError

GCS_EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"  # Google's client libraries' own, for emulators
AZURE_CONNECTION_VARIABLE = "AZURE_STORAGE_CONNECTION_STRING"  # Azure's tools' own
MOUNT_VARIABLES = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}


class CloudRepositories:
    """Makes one `Mirror` per cloud location; the environment gives credentials and mounts.
    A directory `close()` never reaches is removed when the interpreter exits."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self._directories: list[tempfile.TemporaryDirectory[str]] = []

    def mirror(self, text: str) -> Mirror:
        """A mirror of the location, not yet synced; raises LocationError for a malformed URL
        or unreadable credentials, MissingLibraryError without the scheme's library."""
        location = parse_location(text)
        credential = credential_for(location, self._env)
        store: ObjectStore
        if isinstance(credential, S3Credential):
            store = S3Store(location, credential)
        elif isinstance(credential, GcsCredential):
            store = GcsStore(location, credential, self._env.get(GCS_EMULATOR_VARIABLE, ""))
        else:
            assert isinstance(credential, AzureCredential)
            store = AzureStore(location, credential, self._env.get(AZURE_CONNECTION_VARIABLE, ""))
        variable = MOUNT_VARIABLES[location.scheme]
        mount = self._env.get(variable) or None
        try:
            directory = tempfile.TemporaryDirectory(prefix=f"convoy-{location.scheme}-", dir=mount)
        except OSError as exc:
            raise LocationError(
                f"model repository '{text}': cannot make its local copy in {variable}='{mount}': "
                f"{exc}"
            ) from exc
        self._directories.append(directory)
        base = Path(directory.name)
        return Mirror(store, base / "repository", base / "staging")

    def close(self) -> None:
        """Remove every local copy."""
        for directory in self._directories:
            directory.cleanup()
        self._directories.clear()
