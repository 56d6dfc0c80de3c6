"""The classification extension through the unchanged tritonclient on both protocols:
`InferRequestedOutput(name, class_count=k)` answers the top k classes as BYTES
"<value>:<index>[:<label>]", per batch entry for a batching model, over the whole output for a
non-batching one, for an ensemble's output with the ensemble's labels, unary and streaming."""

from __future__ import annotations

import contextlib
import json
import queue
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, raw_tensor
from onnx import TensorProto, helper
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from scripts import models

CLASSES = 5
LABELS = ("cat", "dog", "eel", "fox", "gnu")
ENSEMBLE_LABELS = ("CAT", "DOG", "EEL", "FOX", "GNU")
NOBATCH_DIMS = (2, 4)  # the identity model file is [-1, 4]
NOBATCH_LABELS = ("a", "b", "", "d")  # fewer labels than classes; an empty line is no label
SCORES = np.array(
    [[0.5, 2.0, -1.0, 3.25, 0.0], [4.0, 4.0, 1.0, -2.0, 8.5], [0.0, 0.0, 0.0, 0.0, 0.0]],
    np.float32,
)


def _classifier() -> onnx.ModelProto:
    """INPUT [batch, 5] -> PROBS = Softmax(INPUT), SCORES = INPUT: a five-class classifier head
    and its raw scores."""
    shape: list[str | int | None] = [models.BATCH_DIM, CLASSES]
    graph = helper.make_graph(
        [
            helper.make_node("Softmax", ["INPUT"], ["PROBS"], axis=-1, name="softmax"),
            helper.make_node("Identity", ["INPUT"], ["SCORES"], name="scores"),
        ],
        "classifier",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("PROBS", "SCORES")],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", models.OPSET)],
        ir_version=models.IR_VERSION,
    )


def _classifier_config(name: str, label_file: str) -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]\n'
        "output [\n"
        f'  {{ name: "PROBS" data_type: TYPE_FP32 dims: [ {CLASSES} ] '
        f'label_filename: "{label_file}" }},\n'
        f'  {{ name: "SCORES" data_type: TYPE_FP32 dims: [ {CLASSES} ] }}\n'
        "]\n"
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    )


def _write_labels(directory: Path, name: str, labels: tuple[str, ...]) -> None:
    (directory / name).write_text("".join(f"{label}\n" for label in labels), encoding="utf-8")


def _repository(repo: Path) -> Path:
    classifier = models.write_model(
        repo, "classifier", _classifier(), _classifier_config("classifier", "labels.txt")
    )
    _write_labels(classifier, "labels.txt", LABELS)
    # Its label file is missing: the model does not load.
    models.write_model(repo, "unlabeled", _classifier(), _classifier_config("unlabeled", "x.txt"))
    dims = ", ".join(str(d) for d in NOBATCH_DIMS)
    nobatch = models.write_model(
        repo,
        "nobatch",
        models.identity(TensorProto.FLOAT),
        'name: "nobatch"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'
        f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] '
        'label_filename: "labels.txt" } ]\n',
    )
    _write_labels(nobatch, "labels.txt", NOBATCH_LABELS)
    models.write_model(
        repo,
        "text",
        models.identity(TensorProto.STRING),
        models.identity_config("text", TensorProto.STRING),
    )
    ensemble = models.write_model(
        repo,
        "ensemble",
        None,
        'name: "ensemble"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        f'input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]\n'
        f'output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {CLASSES} ] '
        'label_filename: "ensemble_labels.txt" } ]\n'
        'ensemble_scheduling { step [ { model_name: "classifier" model_version: -1 '
        'input_map { key: "INPUT" value: "IN" } output_map { key: "PROBS" value: "OUT" } } ] }\n',
    )
    (ensemble / "1").mkdir()
    _write_labels(ensemble, "ensemble_labels.txt", ENSEMBLE_LABELS)
    return repo


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConvoyServer]:
    repo = _repository(tmp_path_factory.mktemp("classification"))
    log = tmp_path_factory.mktemp("log") / "server.log"
    running = ConvoyServer(repo, log, "--strict-readiness", "false").start()
    try:
        yield running
        assert running.stop() == 0, running.log()
    finally:
        running.kill()


@pytest.fixture(params=["grpc", "http"])
def api(request: pytest.FixtureRequest) -> ModuleType:
    """tritonclient.grpc or tritonclient.http: their InferInput, InferRequestedOutput and
    client take the same arguments."""
    return grpcclient if request.param == "grpc" else httpclient


@pytest.fixture
def client(api: ModuleType, server: ConvoyServer) -> Iterator[Any]:
    url = server.url if api is grpcclient else f"127.0.0.1:{server.http_port}"
    with contextlib.closing(api.InferenceServerClient(url)) as opened:
        yield opened


def _input(api: ModuleType, name: str, array: np.ndarray) -> Any:
    tensor = api.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


def _classes(result: Any, name: str) -> list[Any]:
    """An answered BYTES output as nested lists of text."""
    array = result.as_numpy(name)
    text = np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(array)
    return text.tolist()  # type: ignore[no-any-return]


def _expected(rows: np.ndarray, k: int, labels: tuple[str, ...] = ()) -> list[list[str]]:
    """Triton's strings for each row: "%f" of the value, the index, the label if there is one,
    highest first and equal values in index order."""
    answer = []
    for row in rows:
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]
        answer.append(
            [
                f"{float(row[i]):f}:{i}"
                + (f":{labels[i]}" if i < len(labels) and labels[i] else "")
                for i in order
            ]
        )
    return answer


def _status(error: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(error.value.status())


def test_a_batching_model_answers_each_entry_with_and_without_labels(
    api: ModuleType, client: Any
) -> None:
    result = client.infer(
        "classifier",
        [_input(api, "INPUT", SCORES)],
        outputs=[
            api.InferRequestedOutput("PROBS", class_count=3),
            api.InferRequestedOutput("SCORES", class_count=2),
        ],
    )
    probs = client.infer("classifier", [_input(api, "INPUT", SCORES)]).as_numpy("PROBS")
    assert _classes(result, "PROBS") == _expected(probs, 3, LABELS)
    assert _classes(result, "SCORES") == [
        ["3.250000:3", "2.000000:1"],
        ["8.500000:4", "4.000000:0"],
        ["0.000000:0", "0.000000:1"],
    ]
    for name in ("PROBS", "SCORES"):
        output = result.get_output(name)
        datatype = output.datatype if api is grpcclient else output["datatype"]
        shape = list(output.shape if api is grpcclient else output["shape"])
        assert (datatype, shape) == ("BYTES", [3, 3 if name == "PROBS" else 2])


def test_k_beyond_the_class_count_returns_every_class(api: ModuleType, client: Any) -> None:
    result = client.infer(
        "classifier",
        [_input(api, "INPUT", SCORES[:1])],
        outputs=[api.InferRequestedOutput("SCORES", class_count=100)],
    )
    assert _classes(result, "SCORES") == _expected(SCORES[:1], CLASSES)


def test_mixed_batch_sizes_batched_together_are_classified_per_request(
    api: ModuleType, client: Any
) -> None:
    """Requests of 1, 2 and 3 entries sent at once (one batch of six, within the queue delay):
    each is answered its own rows' classes."""
    answers: queue.Queue[tuple[int, Any]] = queue.Queue()
    sizes = (1, 2, 3)
    pending = []
    for index, size in enumerate(sizes):
        rows = np.roll(SCORES, index, axis=1)[:size].copy()
        inputs = [_input(api, "INPUT", rows)]
        outputs = [api.InferRequestedOutput("SCORES", class_count=2)]
        if api is grpcclient:
            client.async_infer(
                "classifier",
                inputs,
                lambda result, error, index=index: answers.put((index, error or result)),
                outputs=outputs,
            )
        else:
            pending.append((index, client.async_infer("classifier", inputs, outputs=outputs)))
    if api is httpclient:
        client_answers = [(index, call.get_result()) for index, call in pending]
    else:
        client_answers = [answers.get(timeout=30) for _ in sizes]
    for index, result in client_answers:
        assert not isinstance(result, Exception), result
        rows = np.roll(SCORES, index, axis=1)[: sizes[index]]
        assert _classes(result, "SCORES") == _expected(rows, 2)


def test_a_non_batching_model_ranks_its_whole_output(api: ModuleType, client: Any) -> None:
    values = np.array([[0.25, 1.5, 0.75, 3.0], [2.5, -1.0, 1.0, 0.5]], np.float32)
    result = client.infer(
        "nobatch",
        [_input(api, "INPUT0", values)],
        outputs=[api.InferRequestedOutput("OUTPUT0", class_count=10)],
    )
    # Labels for classes 0, 1 and 3; class 2's line is empty and 4 to 7 are past the file.
    assert _classes(result, "OUTPUT0") == [
        "3.000000:3:d",
        "2.500000:4",
        "1.500000:1:b",
        "1.000000:6",
        "0.750000:2",
        "0.500000:7",
        "0.250000:0:a",
        "-1.000000:5",
    ]


def test_an_ensemble_output_takes_the_ensembles_labels(api: ModuleType, client: Any) -> None:
    rows = SCORES[:2]
    result = client.infer(
        "ensemble",
        [_input(api, "IN", rows)],
        outputs=[api.InferRequestedOutput("OUT", class_count=2)],
    )
    probs = client.infer("classifier", [_input(api, "INPUT", rows)]).as_numpy("PROBS")
    assert _classes(result, "OUT") == _expected(probs, 2, ENSEMBLE_LABELS)


def test_a_bytes_output_has_no_class_result(api: ModuleType, client: Any) -> None:
    words = np.array([[b"b", b"a"]], dtype=np.object_)
    tensor = api.InferInput("INPUT0", [1, 2], "BYTES")
    tensor.set_data_from_numpy(words)
    with pytest.raises(InferenceServerException) as error:
        client.infer("text", [tensor], outputs=[api.InferRequestedOutput("OUTPUT0", class_count=1)])
    assert _status(error) in ("StatusCode.INVALID_ARGUMENT", "400")
    assert error.value.message() == (
        "class result not available for output due to unsupported type 'BYTES'"
    )


def test_a_negative_count_is_refused(api: ModuleType, client: Any) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.infer(
            "classifier",
            [_input(api, "INPUT", SCORES[:1])],
            outputs=[api.InferRequestedOutput("SCORES", class_count=-2)],
        )
    assert _status(error) in ("StatusCode.INVALID_ARGUMENT", "400")
    assert "invalid value for 'classification' parameter, expected >= 0" in (error.value.message())


def test_a_missing_label_file_keeps_the_model_from_loading(api: ModuleType, client: Any) -> None:
    assert not client.is_model_ready("unlabeled")
    assert client.is_model_ready("classifier")
    if api is grpcclient:
        entries = [(m.name, m.state, m.reason) for m in client.get_model_repository_index().models]
    else:
        entries = [
            (m["name"], m.get("state"), m.get("reason", ""))
            for m in client.get_model_repository_index()
        ]
    reasons = [reason for name, state, reason in entries if name == "unlabeled"]
    assert reasons and all("'x.txt' of output 'PROBS'" in reason for reason in reasons), entries
    assert all(state == "UNAVAILABLE" for name, state, _ in entries if name == "unlabeled")


def test_streamed_requests_are_classified(server: ConvoyServer) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
        client.start_stream(lambda result, error: answers.put(error or result))
        for index in range(3):
            client.async_stream_infer(
                "classifier",
                [_input(grpcclient, "INPUT", SCORES[index : index + 1])],
                outputs=[grpcclient.InferRequestedOutput("SCORES", class_count=1)],
                request_id=str(index),
            )
        got = {}
        for _ in range(3):
            result = answers.get(timeout=30)
            assert not isinstance(result, Exception), result
            got[result.get_response().id] = _classes(result, "SCORES")
        client.stop_stream()
    assert got == {str(i): _expected(SCORES[i : i + 1], 1) for i in range(3)}


def _grpc_request(**parameters: Any) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="classifier")
    raw_tensor(request, "INPUT", "FP32", [1, CLASSES])
    request.raw_input_contents.append(SCORES[0].tobytes())
    output = request.outputs.add(name="SCORES")
    for key, value in parameters.items():
        setattr(output.parameters[key], *value)
    return request


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        pytest.param(
            {"classification": ("string_param", "3")},
            "invalid value type for 'classification' parameter, expected int64_param",
            id="count-not-an-integer",
        ),
        pytest.param(
            {
                "classification": ("int64_param", 2),
                "shared_memory_region": ("string_param", "region"),
                "shared_memory_byte_size": ("int64_param", 64),
            },
            "output can't set both 'shared_memory_region' and 'classification'",
            id="shared-memory",
        ),
    ],
)
def test_grpc_parameters_tritonclient_cannot_send_are_refused_in_tritons_words(
    server: ConvoyServer, parameters: dict[str, tuple[str, object]], message: str
) -> None:
    with grpc.insecure_channel(server.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.ModelInfer(_grpc_request(**parameters), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == message


def test_http_classification_into_shared_memory_is_refused_in_tritons_words(
    server: ConvoyServer,
) -> None:
    body = {
        "inputs": [
            {"name": "INPUT", "datatype": "FP32", "shape": [1, CLASSES], "data": [1, 2, 3, 4, 5]}
        ],
        "outputs": [
            {
                "name": "SCORES",
                "parameters": {
                    "classification": 2,
                    "shared_memory_region": "region",
                    "shared_memory_byte_size": 64,
                },
            }
        ],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/classifier/infer",
        data=json.dumps(body).encode("utf-8"),
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=30)
    assert error.value.code == 400
    assert json.loads(error.value.read()) == {
        "error": "Output can't set both 'shared_memory_region' and 'classification'"
    }


def test_json_answers_carry_the_classes_as_strings(server: ConvoyServer) -> None:
    with contextlib.closing(
        httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    ) as client:
        result = client.infer(
            "classifier",
            [_input(httpclient, "INPUT", SCORES[:1])],
            outputs=[httpclient.InferRequestedOutput("SCORES", binary_data=False, class_count=2)],
        )
    assert result.get_output("SCORES")["data"] == ["3.250000:3", "2.000000:1"]
