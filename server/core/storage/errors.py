"""Errors of cloud model repositories; each message names the location it concerns."""


class StorageError(Exception):
    """Base of every cloud storage error."""


class LocationError(StorageError):
    """A repository URL that cannot be parsed, or credentials that cannot be read for it."""


class MissingLibraryError(StorageError):
    """The storage library a scheme needs is not installed (the message names the extra)."""


class StorageUnavailableError(StorageError):
    """A repository could not be listed or downloaded: a missing bucket, refused credentials or
    an unreachable endpoint; the local copy is left as it was."""
