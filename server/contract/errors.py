"""Errors raised by the server's domain code; each front end maps each to its status code."""

SERVER_STOPPING = "Server is stopping and accepts no new requests"  # its message, Triton's words


class ServerError(Exception):
    """Base of every server error."""


class ServerStoppingError(ServerError):
    """The server is shutting down and takes no new requests."""


class ModelNotFoundError(ServerError):
    """No model (or no such version of it) exists in the repository."""


class ModelNotReadyError(ServerError):
    """The model exists but has no ready version to serve the request."""


class ConfigError(ServerError):
    """A config.pbtxt, or the config a model file implies, is invalid."""


class InvalidInputError(ServerError):
    """A request's inputs, outputs or parameters do not fit the model or the protocol."""


class UnsupportedError(ServerError):
    """The request asks for a feature Convoy does not provide (in this mode)."""


class ModelControlDisabledError(ServerError):
    """Loading and unloading through the API needs explicit model control mode."""

    def __init__(self) -> None:
        # Triton's words, in the none and poll modes alike.
        super().__init__("explicit model load / unload is not allowed if polling is enabled")


class ModelLoadFailedError(ServerError):
    """A load or reload through the API (or a poll) failed; the reasons are in the message."""


class RestrictedError(ServerError):
    """The RPC's protocol group needs a header the request does not carry."""


class AlreadyExistsError(ServerError):
    """Something with that name is registered already (e.g. a shared memory region)."""


class RegionNotFoundError(ServerError):
    """No shared memory region is registered under that name."""


class UnavailableError(ServerError):
    """The core refused or dropped a request for now (queue full, timed out in the queue, the
    version closing); the same request may succeed later."""


class InternalError(ServerError):
    """The core failed in a way the request did not cause (a model failed to run or load)."""
