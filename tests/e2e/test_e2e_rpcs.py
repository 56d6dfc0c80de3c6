"""Every RPC but ModelInfer, through tritonclient against the shared server; and the metrics."""

from __future__ import annotations

import urllib.request
from importlib import metadata

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import (
    AUTOCOMPLETE_MODEL,
    BROKEN_MODELS,
    EXAMPLE_MODELS,
    IDENTITY_TYPES,
    NO_BATCH_DIMS,
    NO_BATCH_MODEL,
    PARTIAL_CONFIG_MAX_BATCH_SIZE,
    PARTIAL_CONFIG_MODEL,
    TYPO_FIELD,
    VERSIONS_ALL_MODEL,
    VERSIONS_LATEST_MODEL,
    ConvoyServer,
    identity_model,
)
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

# Every extension name Triton's ServerMetadata may report, in its order.
TRITON_EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)
READY_MODELS = {
    *EXAMPLE_MODELS,
    *(identity_model(t) for t in IDENTITY_TYPES),
    AUTOCOMPLETE_MODEL,
    PARTIAL_CONFIG_MODEL,
    NO_BATCH_MODEL,
    VERSIONS_ALL_MODEL,
    VERSIONS_LATEST_MODEL,
}


def _status(error: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(error.value.status())


def _infer_simple(client: grpcclient.InferenceServerClient, batch: int) -> None:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [batch, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((batch, 16), dtype=np.float32))
        inputs.append(tensor)
    client.infer("simple", inputs)


def test_server_is_live_and_ready_despite_broken_models(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert client.is_server_live()
    # --strict-readiness false: the broken models do not make the server unready.
    assert client.is_server_ready()


@pytest.mark.parametrize(
    ("name", "version", "ready"),
    [
        ("simple", "", True),
        ("simple", "1", True),
        ("simple", "2", False),
        ("resnet18", "", True),
        ("no_such_model", "", False),
        ("broken_typo", "", False),
        ("broken_garbage", "", False),
        ("broken_garbage", "1", False),
        ("broken_python", "", False),
        (VERSIONS_ALL_MODEL, "1", True),
        (VERSIONS_ALL_MODEL, "2", True),
        (VERSIONS_LATEST_MODEL, "", True),
        (VERSIONS_LATEST_MODEL, "1", False),
        (VERSIONS_LATEST_MODEL, "2", True),
    ],
)
def test_model_ready(
    client: grpcclient.InferenceServerClient, name: str, version: str, ready: bool
) -> None:
    assert client.is_model_ready(name, version) is ready


def test_model_ready_with_a_non_numeric_version_is_invalid(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.is_model_ready("simple", "latest")
    assert _status(error) == "StatusCode.INVALID_ARGUMENT"
    assert "latest" in error.value.message()


def test_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    answer = client.get_server_metadata()
    assert answer.name == "convoy"
    assert answer.version == metadata.version("convoy")
    # Triton's list, in Triton's order, less what gRPC has not (binary tensor data) and what
    # needs a GPU (CUDA shared memory).
    assert [e for e in answer.extensions if e != "cuda_shared_memory"] == [
        e for e in TRITON_EXTENSIONS if e not in ("cuda_shared_memory", "binary_tensor_data")
    ]


def _tensors(items: object) -> list[tuple[str, str, list[int]]]:
    return [(t.name, t.datatype, list(t.shape)) for t in items]  # type: ignore[attr-defined]


def test_model_metadata_of_a_batching_model_has_a_batch_dim(
    client: grpcclient.InferenceServerClient,
) -> None:
    answer = client.get_model_metadata("simple")
    assert answer.name == "simple"
    assert list(answer.versions) == ["1"]
    assert answer.platform == "onnxruntime_onnx"
    assert _tensors(answer.inputs) == [
        ("INPUT0", "FP32", [-1, 16]),
        ("INPUT1", "FP32", [-1, 16]),
    ]
    assert _tensors(answer.outputs) == [
        ("OUTPUT0", "FP32", [-1, 16]),
        ("OUTPUT1", "FP32", [-1, 16]),
    ]


@pytest.mark.parametrize(
    ("name", "inputs", "outputs"),
    [
        ("resnet18", [("input", "FP32", [-1, 3, 224, 224])], [("output", "FP32", [-1, 1000])]),
        ("identity_bytes", [("INPUT0", "BYTES", [-1, -1])], [("OUTPUT0", "BYTES", [-1, -1])]),
        ("identity_bf16", [("INPUT0", "BF16", [-1, 4])], [("OUTPUT0", "BF16", [-1, 4])]),
        (
            NO_BATCH_MODEL,
            [("INPUT0", "FP32", list(NO_BATCH_DIMS))],
            [("OUTPUT0", "FP32", list(NO_BATCH_DIMS))],
        ),
        (
            AUTOCOMPLETE_MODEL,
            [("INPUT0", "FP32", [-1, 16]), ("INPUT1", "FP32", [-1, 16])],
            [("OUTPUT0", "FP32", [-1, 16]), ("OUTPUT1", "FP32", [-1, 16])],
        ),
        (PARTIAL_CONFIG_MODEL, [("INPUT", "FP32", [-1, 256])], [("OUTPUT", "FP32", [-1, 10])]),
    ],
)
def test_model_metadata_shapes(
    client: grpcclient.InferenceServerClient,
    name: str,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
) -> None:
    answer = client.get_model_metadata(name)
    assert _tensors(answer.inputs) == inputs
    assert _tensors(answer.outputs) == outputs


def test_model_metadata_lists_the_ready_versions(client: grpcclient.InferenceServerClient) -> None:
    assert list(client.get_model_metadata(VERSIONS_ALL_MODEL).versions) == ["1", "2"]
    assert list(client.get_model_metadata(VERSIONS_LATEST_MODEL).versions) == ["2"]


def test_model_metadata_of_a_specific_version_lists_only_that_version(
    client: grpcclient.InferenceServerClient,
) -> None:
    # As Triton (core tritonserver.cc, TRITONSERVER_ServerModelMetadata).
    assert list(client.get_model_metadata(VERSIONS_ALL_MODEL, "1").versions) == ["1"]
    assert list(client.get_model_metadata(VERSIONS_ALL_MODEL, "2").versions) == ["2"]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("no_such_model", "StatusCode.NOT_FOUND"),
        ("broken_typo", "StatusCode.UNAVAILABLE"),
        ("broken_garbage", "StatusCode.UNAVAILABLE"),
    ],
)
def test_model_metadata_and_config_of_missing_models_fail(
    client: grpcclient.InferenceServerClient, name: str, code: str
) -> None:
    for call in (client.get_model_metadata, client.get_model_config):
        with pytest.raises(InferenceServerException) as error:
            call(name)
        assert _status(error) == code
        assert name in error.value.message()


def test_model_config_of_a_model_without_config_pbtxt_is_auto_completed(
    client: grpcclient.InferenceServerClient,
) -> None:
    config = client.get_model_config(AUTOCOMPLETE_MODEL).config
    assert config.name == AUTOCOMPLETE_MODEL
    assert config.backend == "onnxruntime"
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT0", mc.TYPE_FP32, [16]),
        ("INPUT1", mc.TYPE_FP32, [16]),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT0", mc.TYPE_FP32, [16]),
        ("OUTPUT1", mc.TYPE_FP32, [16]),
    ]
    assert config.version_policy.WhichOneof("policy_choice") == "latest"
    assert config.version_policy.latest.num_versions == 1
    assert config.default_model_filename == "model.onnx"
    assert len(config.instance_group) >= 1
    for group in config.instance_group:
        assert group.name
        assert group.kind == mc.ModelInstanceGroup.KIND_CPU
        assert group.count >= 1


def test_model_config_normalizes_preferred_batch_size(
    client: grpcclient.InferenceServerClient,
) -> None:
    # Triton's core reports an empty preferred_batch_size as [max_batch_size].
    config = client.get_model_config(AUTOCOMPLETE_MODEL).config
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    mlp = client.get_model_config("mlp").config  # config.pbtxt says `dynamic_batching { }`
    assert list(mlp.dynamic_batching.preferred_batch_size) == [64]


def test_model_config_fills_in_tensors_a_config_leaves_out(
    client: grpcclient.InferenceServerClient,
) -> None:
    config = client.get_model_config(PARTIAL_CONFIG_MODEL).config
    assert config.max_batch_size == PARTIAL_CONFIG_MAX_BATCH_SIZE
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT", mc.TYPE_FP32, [256])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("OUTPUT", mc.TYPE_FP32, [10])
    ]


def test_model_config_keeps_what_config_pbtxt_says(
    client: grpcclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("resnet18").config
    assert config.name == "resnet18"
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 32
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert [(g.kind, g.count) for g in config.instance_group] == [
        (mc.ModelInstanceGroup.KIND_CPU, 1)
    ]
    nobatch = client.get_model_config(NO_BATCH_MODEL).config
    assert nobatch.max_batch_size == 0
    assert not nobatch.HasField("dynamic_batching")
    assert [list(t.dims) for t in nobatch.input] == [list(NO_BATCH_DIMS)]


def test_model_config_of_each_version(client: grpcclient.InferenceServerClient) -> None:
    all_config = client.get_model_config(VERSIONS_ALL_MODEL, "1").config
    assert all_config.version_policy.WhichOneof("policy_choice") == "all"
    with pytest.raises(InferenceServerException) as error:
        client.get_model_config(VERSIONS_LATEST_MODEL, "1")
    assert _status(error) == "StatusCode.NOT_FOUND"


def test_repository_index_lists_every_model_with_its_state(
    client: grpcclient.InferenceServerClient,
) -> None:
    index = client.get_model_repository_index().models
    states: dict[tuple[str, str], str] = {(m.name, m.version): m.state for m in index}
    for name in READY_MODELS - {VERSIONS_ALL_MODEL, VERSIONS_LATEST_MODEL}:
        assert states[(name, "1")] == "READY", name
    assert states[(VERSIONS_ALL_MODEL, "1")] == "READY"
    assert states[(VERSIONS_ALL_MODEL, "2")] == "READY"
    assert states[(VERSIONS_LATEST_MODEL, "2")] == "READY"
    assert (VERSIONS_LATEST_MODEL, "1") not in states
    assert {m.name for m in index} == READY_MODELS | set(BROKEN_MODELS)
    for model in index:
        if model.state == "READY":
            assert model.reason == ""


@pytest.mark.parametrize("name", sorted(BROKEN_MODELS))
def test_repository_index_gives_the_reason_a_model_is_broken(
    client: grpcclient.InferenceServerClient, name: str
) -> None:
    entries = [m for m in client.get_model_repository_index().models if m.name == name]
    assert entries
    for entry in entries:
        assert entry.state == "UNAVAILABLE"
        assert BROKEN_MODELS[name] in entry.reason, entry.reason


def test_repository_index_names_the_typo_with_file_and_line(
    client: grpcclient.InferenceServerClient,
) -> None:
    (entry,) = [m for m in client.get_model_repository_index().models if m.name == "broken_typo"]
    assert "broken_typo/config.pbtxt" in entry.reason
    assert "line 3" in entry.reason
    assert TYPO_FIELD in entry.reason


def test_repository_index_ready_filter(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    # tritonclient has no argument for `ready`, so this goes through its protobuf stub.
    answer = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
    assert {m.name for m in answer.models} == READY_MODELS
    assert {m.state for m in answer.models} == {"READY"}


def _stats(client: grpcclient.InferenceServerClient, name: str) -> service_pb2.ModelStatistics:
    (stats,) = client.get_inference_statistics(name).model_stats
    return stats


def test_model_statistics_count_inferences(client: grpcclient.InferenceServerClient) -> None:
    before = _stats(client, "simple")
    for batch in (1, 3, 3):
        _infer_simple(client, batch)
    after = _stats(client, "simple")
    assert after.name == "simple"
    assert after.version == "1"
    assert after.inference_count - before.inference_count == 7
    assert after.execution_count - before.execution_count == 3
    success, fail = after.inference_stats.success, after.inference_stats.fail
    assert success.count - before.inference_stats.success.count == 3
    assert success.ns > before.inference_stats.success.ns
    assert fail.count == before.inference_stats.fail.count
    for field in ("queue", "compute_input", "compute_infer", "compute_output"):
        delta = getattr(after.inference_stats, field).count
        assert delta - getattr(before.inference_stats, field).count == 3, field
    assert after.last_inference > 0
    assert after.last_inference >= before.last_inference
    batches_before = {b.batch_size: b.compute_infer.count for b in before.batch_stats}
    batches_after = {b.batch_size: b.compute_infer.count for b in after.batch_stats}
    assert batches_after[3] - batches_before.get(3, 0) == 2
    assert batches_after[1] - batches_before.get(1, 0) == 1
    for batch in after.batch_stats:
        assert batch.compute_infer.ns > 0


def test_model_statistics_count_failures(client: grpcclient.InferenceServerClient) -> None:
    before = _stats(client, "simple")
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    with pytest.raises(InferenceServerException):
        client.infer("simple", [tensor])  # INPUT1 missing
    after = _stats(client, "simple")
    assert after.inference_count == before.inference_count
    assert after.inference_stats.success.count == before.inference_stats.success.count


def test_model_statistics_of_all_models(client: grpcclient.InferenceServerClient) -> None:
    stats = client.get_inference_statistics().model_stats
    versions = {(s.name, s.version) for s in stats}
    assert {(name, "1") for name in READY_MODELS - {VERSIONS_LATEST_MODEL}} <= versions
    assert (VERSIONS_ALL_MODEL, "2") in versions
    assert (VERSIONS_LATEST_MODEL, "2") in versions
    assert (VERSIONS_LATEST_MODEL, "1") not in versions
    assert not {name for name, _ in versions} & set(BROKEN_MODELS)


def test_model_statistics_of_one_version(client: grpcclient.InferenceServerClient) -> None:
    stats = client.get_inference_statistics(VERSIONS_ALL_MODEL, "2").model_stats
    assert [(s.name, s.version) for s in stats] == [(VERSIONS_ALL_MODEL, "2")]
    both = client.get_inference_statistics(VERSIONS_ALL_MODEL).model_stats
    assert sorted(s.version for s in both) == ["1", "2"]


def test_model_statistics_of_an_unknown_model_fail(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.get_inference_statistics("no_such_model")
    # Triton answers INVALID_ARGUMENT ("requested model ... is not available"); NOT_FOUND is
    # the other defensible answer.
    assert _status(error) in ("StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT")


def test_model_statistics_of_a_broken_model_fail(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.get_inference_statistics("broken_garbage")
    assert _status(error) == "StatusCode.INVALID_ARGUMENT"


def test_model_load_without_model_control_is_unavailable(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.load_model("simple")
    assert _status(error) == "StatusCode.UNAVAILABLE"


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        body: bytes = answer.read()
    return body.decode("utf-8")


def _sample(text: str, name: str, labels: str) -> float:
    prefix = f"{name}{{{labels}"
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"{prefix}: {lines}"
    return float(lines[0].rsplit(" ", 1)[1])


def test_metrics_match_the_statistics(
    client: grpcclient.InferenceServerClient, convoy: ConvoyServer
) -> None:
    _infer_simple(client, 2)
    stats = _stats(client, "simple")
    text = _scrape(convoy.metrics_port)
    labels = 'model="simple",version="1"'
    assert _sample(text, "nv_inference_count", labels) == stats.inference_count > 0
    assert _sample(text, "nv_inference_exec_count", labels) == stats.execution_count
    assert (
        _sample(text, "nv_inference_request_success", labels) == stats.inference_stats.success.count
    )
    assert 'model="broken_garbage"' not in text


def test_metrics_type_lines_name_the_samples(convoy: ConvoyServer) -> None:
    text = _scrape(convoy.metrics_port)
    assert "# TYPE nv_inference_count counter" in text.splitlines()
    assert "_total{" not in text and "_total " not in text  # no counter renamed *_total
