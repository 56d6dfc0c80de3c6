"""Cloud model repositories (s3://, gs://, as://): URLs, credentials, and local mirrors that a
sync brings up to date by listing, downloading only changed objects."""

from server.core.storage._cache import MOUNT_VARIABLES, CloudRepositories
from server.core.storage._credentials import (
    CREDENTIAL_FILE_VARIABLE,
    AzureCredential,
    Credential,
    GcsCredential,
    S3Credential,
    credential_for,
)
from server.core.storage._locations import CloudLocation, is_cloud, parse_location
from server.core.storage._mirror import Mirror, ObjectInfo, ObjectStore
from server.core.storage.errors import (
    LocationError,
    MissingLibraryError,
    StorageError,
    StorageUnavailableError,
)

__all__ = [
    "CREDENTIAL_FILE_VARIABLE",
    "MOUNT_VARIABLES",
    "AzureCredential",
    "CloudLocation",
    "CloudRepositories",
    "Credential",
    "GcsCredential",
    "LocationError",
    "Mirror",
    "MissingLibraryError",
    "ObjectInfo",
    "ObjectStore",
    "S3Credential",
    "StorageError",
    "StorageUnavailableError",
    "credential_for",
    "is_cloud",
    "parse_location",
]
