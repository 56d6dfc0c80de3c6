"""Data only: generated protocol modules, and their JSON form as Triton prints it.

`proto.grpc_service_pb2_grpc` (stubs and servicer base) is imported on its own by the server,
so that `backends` and `batching`, which read `model_config_pb2`, never load grpc.
"""

from proto import grpc_service_pb2, model_config_pb2
from proto._json import message_json

__all__ = ["grpc_service_pb2", "message_json", "model_config_pb2"]
