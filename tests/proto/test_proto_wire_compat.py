"""Convoy's protocol types are wire compatible with Triton's, checked against tritonclient.

Importing both in one process also proves that Convoy's descriptors stay out of protobuf's
default pool, where tritonclient registers the same symbols.
"""

from collections.abc import Iterator

import pytest
from google.protobuf import descriptor_pool, json_format, text_format
from google.protobuf.descriptor import (
    Descriptor,
    EnumDescriptor,
    FieldDescriptor,
    FileDescriptor,
    ServiceDescriptor,
)
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as triton_config
from tritonclient.grpc import service_pb2 as triton_service

from proto import grpc_service_pb2, model_config_pb2

FILE_PAIRS = [
    pytest.param(model_config_pb2.DESCRIPTOR, triton_config.DESCRIPTOR, id="model_config"),
    pytest.param(grpc_service_pb2.DESCRIPTOR, triton_service.DESCRIPTOR, id="grpc_service"),
]


def _messages(containers: list[Descriptor]) -> Iterator[Descriptor]:
    for message in containers:
        yield message
        yield from _messages(list(message.nested_types))


def _all_messages(file: FileDescriptor) -> dict[str, Descriptor]:
    return {m.full_name: m for m in _messages(list(file.message_types_by_name.values()))}


def _all_enums(file: FileDescriptor) -> dict[str, EnumDescriptor]:
    enums = list(file.enum_types_by_name.values())
    for message in _all_messages(file).values():
        enums.extend(message.enum_types)
    return {e.full_name: e for e in enums}


def _field_signature(field: FieldDescriptor) -> tuple[object, ...]:
    return (
        field.number,
        field.type,
        field.is_repeated,
        field.has_presence,
        field.message_type.full_name if field.message_type else None,
        field.enum_type.full_name if field.enum_type else None,
        field.containing_oneof.name if field.containing_oneof else None,
    )


def test_descriptors_live_outside_the_default_pool() -> None:
    assert grpc_service_pb2.DESCRIPTOR.pool is not descriptor_pool.Default()
    assert model_config_pb2.DESCRIPTOR.pool is grpc_service_pb2.DESCRIPTOR.pool


@pytest.mark.parametrize(("ours", "theirs"), FILE_PAIRS)
def test_messages_match(ours: FileDescriptor, theirs: FileDescriptor) -> None:
    assert ours.package == theirs.package
    our_messages = _all_messages(ours)
    their_messages = _all_messages(theirs)
    assert sorted(our_messages) == sorted(their_messages)
    for name, theirs_message in their_messages.items():
        ours_message = our_messages[name]
        assert ours_message.GetOptions().map_entry == theirs_message.GetOptions().map_entry, name
        assert sorted(o.name for o in ours_message.oneofs) == sorted(
            o.name for o in theirs_message.oneofs
        ), name
        our_fields = {f.name: _field_signature(f) for f in ours_message.fields}
        their_fields = {f.name: _field_signature(f) for f in theirs_message.fields}
        assert our_fields == their_fields, name


@pytest.mark.parametrize(("ours", "theirs"), FILE_PAIRS)
def test_enums_match(ours: FileDescriptor, theirs: FileDescriptor) -> None:
    our_enums = _all_enums(ours)
    their_enums = _all_enums(theirs)
    assert sorted(our_enums) == sorted(their_enums)
    for name, theirs_enum in their_enums.items():
        our_values = {v.name: v.number for v in our_enums[name].values}
        their_values = {v.name: v.number for v in theirs_enum.values}
        assert our_values == their_values, name


def test_service_matches() -> None:
    ours = grpc_service_pb2.DESCRIPTOR.services_by_name
    theirs = triton_service.DESCRIPTOR.services_by_name
    assert sorted(ours) == sorted(theirs) == ["GRPCInferenceService"]

    def methods(service: ServiceDescriptor) -> dict[str, tuple[str, str, bool, bool]]:
        return {
            m.name: (
                m.input_type.full_name,
                m.output_type.full_name,
                m.client_streaming,
                m.server_streaming,
            )
            for m in service.methods
        }

    our_methods = methods(ours["GRPCInferenceService"])
    assert our_methods == methods(theirs["GRPCInferenceService"])
    assert our_methods["ModelStreamInfer"][2:] == (True, True)
    assert ours["GRPCInferenceService"].full_name == "inference.GRPCInferenceService"


def _populate_request(request: Message) -> Message:
    text_format.Parse(
        """
        model_name: "resnet" model_version: "2" id: "req-7"
        parameters { key: "sequence_id" value { uint64_param: 42 } }
        parameters { key: "sequence_start" value { bool_param: true } }
        parameters { key: "priority" value { int64_param: 1 } }
        inputs {
          name: "INPUT0" datatype: "FP32" shape: [2, 3]
          parameters { key: "shared_memory_offset" value { int64_param: 16 } }
        }
        inputs {
          name: "INPUT1" datatype: "BYTES" shape: [2]
          contents { bytes_contents: ["a", "bc"] }
        }
        outputs {
          name: "OUTPUT0"
          parameters { key: "classification" value { int64_param: 3 } }
        }
        raw_input_contents: "\\000\\001\\002\\003"
        """,
        request,
    )
    return request


def _as_text(message: Message) -> str:
    return text_format.MessageToString(message)


def test_infer_request_round_trips_both_ways() -> None:
    ours = _populate_request(grpc_service_pb2.ModelInferRequest())
    theirs = triton_service.ModelInferRequest.FromString(ours.SerializeToString())
    assert _as_text(theirs) == _as_text(ours)
    assert theirs.parameters["sequence_id"].uint64_param == 42

    theirs = _populate_request(triton_service.ModelInferRequest())
    ours = grpc_service_pb2.ModelInferRequest.FromString(theirs.SerializeToString())
    assert _as_text(ours) == _as_text(theirs)
    assert list(ours.inputs[1].contents.bytes_contents) == [b"a", b"bc"]


def test_statistics_round_trip() -> None:
    theirs = triton_service.ModelStatisticsResponse()
    stats = theirs.model_stats.add(name="m", version="1", last_inference=17, inference_count=8)
    stats.inference_stats.queue.count = 8
    stats.inference_stats.cache_miss.ns = 99
    stats.batch_stats.add(batch_size=4).compute_infer.ns = 1000
    stats.memory_usage.add(type="GPU", id=0, byte_size=1 << 20)
    stats.response_stats["0"].empty_response.count = 1
    ours = grpc_service_pb2.ModelStatisticsResponse.FromString(theirs.SerializeToString())
    assert _as_text(ours) == _as_text(theirs)
    assert ours.model_stats[0].response_stats["0"].empty_response.count == 1


BATCHING_CONFIG = """
name: "resnet"
backend: "onnxruntime"
max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [
  { name: "INPUT0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [3, -1, -1]
    allow_ragged_batch: true }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [1000] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 1 value { max_queue_size: 16 allow_timeout_override: true } }
}
instance_group [
  { name: "gpu" kind: KIND_GPU count: 2 gpus: [0, 1]
    rate_limiter { resources [ { name: "R1" global: true count: 2 } ] priority: 1 } },
  { kind: KIND_CPU count: 1 }
]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
optimization {
  execution_accelerators {
    gpu_execution_accelerator [
      { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }
    ]
  }
  cuda {
    graphs: true
    graph_spec [ { batch_size: 4 input { key: "INPUT0" value { dim: [3, 224, 224] } } } ]
  }
  input_pinned_memory { enable: true }
}
model_warmup [
  { name: "w" batch_size: 1
    inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [3, 8, 8] zero_data: true } } }
]
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
model_metrics {
  metric_control [
    { metric_identifier { family: "nv_inference_first_response_histogram_ms" }
      histogram_options { buckets: [1, 10, 100] } }
  ]
}
"""

ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 4
input [ { name: "RAW" data_type: TYPE_STRING dims: [1] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [10] } ]
ensemble_scheduling {
  step [
    { model_name: "preprocess" model_version: -1
      input_map { key: "IN" value: "RAW" } output_map { key: "OUT" value: "pixels" } },
    { model_name: "classifier" model_version: 1
      input_map { key: "INPUT0" value: "pixels" } output_map { key: "OUTPUT0" value: "SCORES" } }
  ]
  max_inflight_requests: 8
}
"""

SEQUENCE_CONFIG = """
name: "stateful"
max_batch_size: 2
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 preferred_batch_size: [2] }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32 dims: [4]
            initial_state [ { name: "zeros" data_type: TYPE_FP32 dims: [4] zero_data: true } ] } ]
}
model_transaction_policy { decoupled: true }
"""


@pytest.mark.parametrize(
    "config_text",
    [
        pytest.param(BATCHING_CONFIG, id="dynamic_batching"),
        pytest.param(ENSEMBLE_CONFIG, id="ensemble"),
        pytest.param(SEQUENCE_CONFIG, id="sequence"),
    ],
)
def test_config_pbtxt_parses_like_triton(config_text: str) -> None:
    ours = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    theirs = text_format.Parse(config_text, triton_config.ModelConfig())
    assert _as_text(ours) == _as_text(theirs)
    assert ours.WhichOneof("scheduling_choice") is not None
    from_wire = triton_config.ModelConfig.FromString(ours.SerializeToString())
    assert _as_text(from_wire) == _as_text(theirs)
    # The "config" parameter of RepositoryModelLoad carries a ModelConfig as JSON.
    from_json = json_format.Parse(json_format.MessageToJson(theirs), model_config_pb2.ModelConfig())
    assert _as_text(from_json) == _as_text(ours)


def test_config_fields_land_where_expected() -> None:
    config = text_format.Parse(BATCHING_CONFIG, model_config_pb2.ModelConfig())
    assert config.version_policy.WhichOneof("policy_choice") == "specific"
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.priority_queue_policy[1].max_queue_size == 16
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    # "global" is a Python keyword, so the field is only reachable through getattr.
    assert getattr(config.instance_group[0].rate_limiter.resources[0], "global") is True
    assert config.parameters["intra_op_thread_count"].string_value == "1"
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
