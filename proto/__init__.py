"""Data only: generated protocol modules."""

from proto import grpc_service_pb2, grpc_service_pb2_grpc, model_config_pb2

__all__ = ["grpc_service_pb2", "grpc_service_pb2_grpc", "model_config_pb2"]
