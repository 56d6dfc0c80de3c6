"""The gRPC edge: Triton's inference service, its tensor codec and the error-to-status table."""

from server.frontend.grpc.edge import RESTRICTABLE_GROUPS, quiet_finished_calls
from server.frontend.grpc.forward import serve_serialized, serve_serialized_stream
from server.frontend.grpc.registration import GenericOnly, inference_handler
from server.frontend.grpc.servicer import InferenceServicer
from server.frontend.grpc.sockets import close_connections, stop_listening
from server.frontend.grpc.status import ERROR_BASES, STATUS_CODES, status_for

__all__ = [
    "ERROR_BASES",
    "RESTRICTABLE_GROUPS",
    "STATUS_CODES",
    "GenericOnly",
    "InferenceServicer",
    "close_connections",
    "inference_handler",
    "quiet_finished_calls",
    "serve_serialized",
    "serve_serialized_stream",
    "status_for",
    "stop_listening",
]
