"""HTTP status codes of errors, derived from the one error table of the gRPC front end."""

from __future__ import annotations

import grpc

from server.contract.errors import RegionNotFoundError, RestrictedError
from server.frontend.grpc.status import status_for

# Triton's HTTP front end answers these gRPC codes so; every other code is a bad request. A
# request that expired unexecuted is 503, as Triton answers one whose queue timeout expired.
HTTP_CODES: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
}
BAD_REQUEST = 400
# Where Triton's HTTP front end answers otherwise than its gRPC code says: a missing restricted
# header is 403 (RespondIfRestricted), and the shared memory extension answers an unknown region
# 400, as it does every other shared memory fault.
HTTP_OVERRIDES: dict[type[Exception], int] = {RestrictedError: 403, RegionNotFoundError: 400}


def http_status_for(error: Exception) -> int:
    """The HTTP status of a known error (through its gRPC code); unknown errors are 500."""
    for cls in type(error).__mro__:
        if cls in HTTP_OVERRIDES:
            return HTTP_OVERRIDES[cls]
    return HTTP_CODES.get(status_for(error), BAD_REQUEST)
