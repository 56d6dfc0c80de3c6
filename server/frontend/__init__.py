"""The front ends: Triton's gRPC service and HTTP/REST routes, each thin (wire -> contract call
-> wire); they reach the core only through `server.contract`."""

from server.frontend.serialized import SerializedAnswer, SerializedInfer

__all__ = ["SerializedAnswer", "SerializedInfer"]
