"""Errors raised by the server's domain code (each front end maps each to its status code),
and the table of Triton's wordings that clients check."""

from __future__ import annotations

from dataclasses import dataclass

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
    version closing); the same request may succeed later: after `retry_after_ms`, where the
    core can tell (a model over its latency target), which gRPC carries to its clients."""

    def __init__(self, message: str = "", retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class DeadlineExceededError(ServerError):
    """The request's deadline passed before it ran (it was never executed)."""


class InternalError(ServerError):
    """The core failed in a way the request did not cause (a model failed to run or load)."""


class NotFoundError(ServerError):
    """Something the request named was not found, as its model answered (a Python model's
    `TritonError.NOT_FOUND`)."""


class RequestCancelledError(ServerError):
    """The request was cancelled, as its model answered (`TritonError.CANCELLED`)."""


class UnknownError(ServerError):
    """A failure its model answered without naming a kind (`TritonError.UNKNOWN`)."""


@dataclass(frozen=True, slots=True)
class Wording:
    """A message Triton clients look for, word for word, with the error class whose status
    (through the front ends' one table) is the one Triton answers it with."""

    error: type[ServerError]
    text: str  # a str.format template; its fields are named

    def __call__(self, **fields: object) -> ServerError:
        return self.error(self.text.format(**fields))


# Triton's wordings where programs written against Triton check them (the sources are named in
# each comment; tests/e2e/test_e2e_triton_wordings.py checks every one over both protocols).
# Where Triton's words end without the reason (a failed poll), ours add it after a colon.

# server:src/grpc/infer_handler.cc, InferGRPCToInput: checked per input before raw counts.
CONTENTS_WITH_RAW = Wording(
    InvalidInputError,
    "contents field must not be specified when using raw_input_contents for '{input}' for "
    "model '{model}'",
)
# server:src/common.cc, GetModelVersionFromString ("stol" is what std::stol's error says).
VERSION_NOT_A_NUMBER = Wording(
    InvalidInputError,
    "failed to get model version from specified version string '{version}' (details: stol), "
    "version should be an integral value > 0",
)
VERSION_NEGATIVE = Wording(
    InvalidInputError,
    "invalid model version specified '{version}' , version should be an integral value > 0",
)
# core:src/model_repository_manager/model_repository_manager.cc, LoadUnloadModel: a load whose
# model could not be polled (not in any repository, a malformed `config` override, a bad
# `file:` parameter, files without a config) is INTERNAL; one that fails to build is
# INVALID_ARG, one "load failed for model" line per model.
LOAD_NOT_POLLED = Wording(
    InternalError, "failed to load '{model}', failed to poll from model repository: {reason}"
)
LOAD_FAILED = Wording(ModelLoadFailedError, "load failed for model '{model}': {reason}")
# server:src/grpc/infer_handler.cc, ParseClassificationParams and InferAllocatorPayload;
# server:src/http_server.cc, ValidateOutputParameter; server:src/classification.cc,
# TopkClassifications.
CLASSIFICATION_NOT_INT64 = Wording(
    InvalidInputError, "invalid value type for 'classification' parameter, expected int64_param"
)
CLASSIFICATION_NOT_POSITIVE = Wording(
    InvalidInputError, "invalid value for 'classification' parameter, expected >= 0"
)
CLASSIFICATION_IN_SHM_GRPC = Wording(
    InvalidInputError, "output can't set both 'shared_memory_region' and 'classification'"
)
CLASSIFICATION_IN_SHM_HTTP = Wording(
    InvalidInputError, "Output can't set both 'shared_memory_region' and 'classification'"
)
CLASSIFICATION_TYPE = Wording(
    InvalidInputError,
    "class result not available for output due to unsupported type '{datatype}'",
)

TRITON_WORDINGS: tuple[Wording, ...] = (
    CONTENTS_WITH_RAW,
    VERSION_NOT_A_NUMBER,
    VERSION_NEGATIVE,
    LOAD_NOT_POLLED,
    LOAD_FAILED,
    CLASSIFICATION_NOT_INT64,
    CLASSIFICATION_NOT_POSITIVE,
    CLASSIFICATION_IN_SHM_GRPC,
    CLASSIFICATION_IN_SHM_HTTP,
    CLASSIFICATION_TYPE,
)
