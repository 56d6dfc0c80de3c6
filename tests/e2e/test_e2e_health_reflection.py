"""Standard gRPC health checking and server reflection, as `grpc_health_probe` and `grpcurl` use
them."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

INFERENCE_SERVICE = "inference.GRPCInferenceService"
TRITON_RPCS = {
    "ServerLive",
    "ServerReady",
    "ModelReady",
    "ServerMetadata",
    "ModelMetadata",
    "ModelInfer",
    "ModelStreamInfer",
    "ModelConfig",
    "ModelStatistics",
    "RepositoryIndex",
    "RepositoryModelLoad",
    "RepositoryModelUnload",
    "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister",
    "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",
    "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister",
    "TraceSetting",
    "LogSettings",
}


@pytest.mark.parametrize("service", ["", INFERENCE_SERVICE])
def test_health_check_is_serving(channel: grpc.Channel, service: str) -> None:
    answer = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service)
    )
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_health_check_of_an_unknown_service_is_not_found(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as error:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="no.such.Service")
        )
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.fixture
def reflection(channel: grpc.Channel) -> ProtoReflectionDescriptorDatabase:
    return ProtoReflectionDescriptorDatabase(channel)


def test_reflection_lists_the_services(reflection: ProtoReflectionDescriptorDatabase) -> None:
    assert set(reflection.get_services()) >= {
        INFERENCE_SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }


def test_reflection_describes_the_inference_service(
    reflection: ProtoReflectionDescriptorDatabase,
) -> None:
    pool = DescriptorPool(reflection)
    service = pool.FindServiceByName(INFERENCE_SERVICE)
    assert {m.name for m in service.methods} == TRITON_RPCS
    infer = service.methods_by_name["ModelInfer"]
    assert infer.input_type.full_name == "inference.ModelInferRequest"
    assert infer.output_type.full_name == "inference.ModelInferResponse"
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.output_type.full_name == "inference.ModelStreamInferResponse"


def test_reflection_describes_model_infer_request(
    reflection: ProtoReflectionDescriptorDatabase,
) -> None:
    request = DescriptorPool(reflection).FindMessageTypeByName("inference.ModelInferRequest")
    fields = {f.name: (f.number, f.type) for f in request.fields}
    assert fields == {
        "model_name": (1, FieldDescriptor.TYPE_STRING),
        "model_version": (2, FieldDescriptor.TYPE_STRING),
        "id": (3, FieldDescriptor.TYPE_STRING),
        "parameters": (4, FieldDescriptor.TYPE_MESSAGE),
        "inputs": (5, FieldDescriptor.TYPE_MESSAGE),
        "outputs": (6, FieldDescriptor.TYPE_MESSAGE),
        "raw_input_contents": (7, FieldDescriptor.TYPE_BYTES),
    }
    tensor = request.nested_types_by_name["InferInputTensor"]
    assert [f.name for f in tensor.fields] == [
        "name",
        "datatype",
        "shape",
        "parameters",
        "contents",
    ]


def test_reflection_serves_the_imported_model_config(
    reflection: ProtoReflectionDescriptorDatabase,
) -> None:
    # ModelConfigResponse embeds inference.ModelConfig from model_config.proto: `grpcurl
    # describe` needs that file too.
    pool = DescriptorPool(reflection)
    response = pool.FindMessageTypeByName("inference.ModelConfigResponse")
    assert response.fields_by_name["config"].message_type.full_name == "inference.ModelConfig"
    config = pool.FindMessageTypeByName("inference.ModelConfig")
    assert config.fields_by_name["max_batch_size"].number == 4
    assert config.fields_by_name["dynamic_batching"].number == 11
