"""Convoy's `triton_python_backend_utils` in-process: Triton's names, types and sender rules."""

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from backends.python import pb_utils


def test_type_tables_match_triton() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("FP32")  # Triton takes only the TYPE_ names
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.dtype("int64")) == 9
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(1) is np.bool_
    assert pb_utils.triton_to_numpy_type(12) is np.float64
    assert pb_utils.triton_to_numpy_type(14) is None
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1


def test_tensor_and_lookups() -> None:
    tensor = pb_utils.Tensor("IN", np.arange(6, dtype=np.int32).reshape(2, 3))
    assert tensor.name() == "IN"
    assert tensor.shape() == [2, 3]
    assert tensor.triton_dtype() == 8
    assert tensor.is_cpu()
    request = pb_utils.InferenceRequest(inputs=[tensor], requested_output_names=["OUT"])
    assert pb_utils.get_input_tensor_by_name(request, "IN") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "NOPE") is None
    assert json.loads(request.parameters()) == {}
    assert request.request_id() == "" and request.correlation_id() == 0
    response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(2))])
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is not None
    assert not response.has_error() and response.error() is None
    config = {"input": [{"name": "IN", "dims": [3]}], "output": [{"name": "OUT"}]}
    assert pb_utils.get_input_config_by_name(config, "IN") == {"name": "IN", "dims": [3]}
    assert pb_utils.get_output_config_by_name(config, "IN") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)


def test_tensor_rejects_what_triton_rejects() -> None:
    with pytest.raises(pb_utils.TritonModelException, match=r"np\.object_"):
        pb_utils.Tensor("S", np.array(["text"]))
    with pytest.raises(pb_utils.TritonModelException, match="complex64"):
        pb_utils.Tensor("C", np.zeros(2, np.complex64))
    with pytest.raises(pb_utils.TritonModelException, match="must be a list"):
        pb_utils.InferenceResponse(pb_utils.Tensor("X", np.zeros(1)))  # type: ignore[arg-type]


def test_dlpack_round_trip() -> None:
    array = np.arange(4, dtype=np.float32)
    from_capsule = pb_utils.Tensor.from_dlpack("A", pb_utils.Tensor("A", array).to_dlpack())
    from_producer = pb_utils.Tensor.from_dlpack("B", pb_utils.Tensor("B", array))
    np.testing.assert_array_equal(from_capsule.as_numpy(), array)
    np.testing.assert_array_equal(from_producer.as_numpy(), array)
    assert np.from_dlpack(from_producer).tolist() == array.tolist()


class _DeviceArray:
    """A DLPack producer on a CUDA device (DLPack device type 2), as DLPack 1.0 describes one:
    it exports its memory to a host consumer only as a copy the consumer asks for."""

    def __init__(self, host: np.ndarray, copies: bool = True) -> None:
        self._host = host
        self._copies = copies

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 1)

    def __dlpack__(
        self,
        *,
        stream: object = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object:
        if self._copies and dl_device is not None and tuple(dl_device) == (1, 0) and copy:
            return self._host.copy().__dlpack__(max_version=max_version)
        raise BufferError("the memory is on CUDA device 1")


def test_a_device_tensor_from_dlpack_becomes_a_host_copy() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor.from_dlpack("OUT", _DeviceArray(array))
    np.testing.assert_array_equal(tensor.as_numpy(), array)
    assert tensor.is_cpu() and tensor.as_numpy().dtype == np.float32
    with pytest.raises(pb_utils.TritonModelException, match=r"on DLPack device \(2, 1\)"):
        pb_utils.Tensor.from_dlpack("OUT", _DeviceArray(array, copies=False))


def test_triton_error_codes() -> None:
    error = pb_utils.TritonError("bad input")
    assert error.message() == "bad input"
    assert error.code() == pb_utils.TritonError.INTERNAL
    assert pb_utils.TritonError("x", pb_utils.TritonError.INVALID_ARG).code() == 3
    assert pb_utils.TritonModelException("m").message() == "m"


def test_response_sender_rules() -> None:
    sent: list[tuple[object, bool]] = []
    sender = pb_utils.InferenceResponseSender(
        lambda response, final: sent.append((response, final))
    )
    response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.zeros(1))])
    with pytest.raises(pb_utils.TritonModelException, match="Inference Response object is needed"):
        sender.send(None, 0)
    sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sent == [(response, False), (None, True)]
    with pytest.raises(pb_utils.TritonModelException, match="closed"):
        sender.send(response)
    assert len(sent) == 2


def test_logger_writes_through_logging(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=pb_utils.LOGGER_NAME):
        pb_utils.Logger.log_warn("careful")
        pb_utils.Logger.log("hello", pb_utils.Logger.INFO)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "careful"),
        (logging.INFO, "hello"),
    ]
    assert all(r.filename == "test_python_pb_utils.py" for r in caplog.records)


def test_exec_needs_a_model_name_and_a_server_behind_it() -> None:
    unnamed = pb_utils.InferenceRequest(inputs=[], requested_output_names=["Y"])
    with pytest.raises(pb_utils.TritonModelException, match="model_name"):
        unnamed.exec()
    named = pb_utils.InferenceRequest(model_name="m", requested_output_names=["Y"])
    for decoupled in (False, True):  # these tests run pb_utils without a worker behind it
        with pytest.raises(pb_utils.TritonModelException, match="only inside a model served"):
            named.exec(decoupled=decoupled)


def test_only_an_iterative_sequences_request_can_be_rescheduled() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=["Y"])
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    with pytest.raises(pb_utils.TritonModelException, match="iterative_sequence"):
        request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    with pytest.raises(pb_utils.TritonModelException, match="release flags 4"):
        request.set_release_flags(4)
    assert request.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
    served = pb_utils.InferenceRequest(model_name="m", reschedulable=True)
    served.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    assert served.release_flags() == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def test_response_parameters_are_checked_as_triton_checks_them() -> None:
    shown: dict[str, bool | int | str] = {"bool": True, "int": 1024, "str": "Hello World!"}
    assert json.loads(pb_utils.InferenceResponse([], parameters=shown).parameters()) == shown
    assert pb_utils.InferenceResponse([]).parameters() == "{}"
    refusals = [
        ([], "Expect parameters to be a dict, got <class 'list'>"),
        ({1: "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"float": 0.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        (
            {"null": None},
            "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>",
        ),
    ]
    for parameters, message in refusals:
        with pytest.raises(pb_utils.TritonModelException) as refused:
            pb_utils.InferenceResponse([], parameters=parameters)  # type: ignore[arg-type]
        assert refused.value.message() == message


def test_a_response_iterator_ends_at_the_final_response_and_cancels_once() -> None:
    answers = iter(
        [(pb_utils.InferenceResponse([]), False), (pb_utils.InferenceResponse([]), True)]
    )
    cancels: list[int] = []
    stream = pb_utils.ResponseIterator(lambda: next(answers), lambda: cancels.append(1))
    assert len(list(stream)) == 2
    stream.cancel()  # after the final response: nothing to cancel
    assert cancels == []


def test_is_cancelled_asks_until_the_final_response_is_sent() -> None:
    asked: list[bool] = []

    def cancelled() -> bool:
        asked.append(True)
        return True

    sender = pb_utils.InferenceResponseSender(lambda response, final: None, cancelled)
    request = pb_utils.InferenceRequest(model_name="m", response_sender=sender)
    assert request.is_cancelled() and sender.is_cancelled()
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert not request.is_cancelled() and len(asked) == 2
    assert not pb_utils.InferenceRequest(model_name="m").is_cancelled()


def test_model_config_completion_adds_and_checks_as_triton() -> None:
    config = pb_utils.ModelConfig(
        {
            "name": "m",
            "max_batch_size": 0,
            "input": [{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}],
        }
    )
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4]})  # as declared: kept
    config.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [-1]})
    config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    done = config.as_dict()
    assert [t["name"] for t in done["input"]] == ["A", "B"]
    assert done["max_batch_size"] == 8 and done["dynamic_batching"] == {}
    with pytest.raises(pb_utils.TritonModelException, match="'A' is TYPE_INT32"):
        config.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(pb_utils.TritonModelException, match="max_batch_size is 8"):
        config.set_max_batch_size(4)
    with pytest.raises(pb_utils.TritonModelException, match="lacks"):
        config.add_output({"name": "Z"})


@pytest.fixture
def shared_dir(tmp_path: Path) -> Iterator[Path]:
    """pb_utils with a version's shared-arrays directory installed, as a worker has it."""
    pb_utils._install_shared_dir(str(tmp_path))
    yield tmp_path
    pb_utils._install_shared_dir(None)


def test_a_shared_array_is_loaded_once_and_mapped_read_only(shared_dir: Path) -> None:
    weights = np.arange(12, dtype=np.float32).reshape(3, 4)
    first = pb_utils.shared_array("weights", lambda: weights)

    def never() -> np.ndarray:
        raise AssertionError("a second instance must not load it again")

    second = pb_utils.shared_array("weights", never)
    for array in (first, second):
        np.testing.assert_array_equal(array, weights)
        assert not array.flags.writeable
    assert sorted(p.name for p in shared_dir.iterdir()) == ["weights.lock", "weights.npy"]


def test_shared_arrays_refuse_objects_and_odd_keys(shared_dir: Path) -> None:
    with pytest.raises(pb_utils.TritonModelException, match="only numeric arrays"):
        pb_utils.shared_array("words", lambda: np.array([b"a"], dtype=object))
    with pytest.raises(pb_utils.TritonModelException, match="letters, digits"):
        pb_utils.shared_array("../escape", lambda: np.zeros(1))
    assert not (shared_dir / "words.npy").exists()


def test_outside_a_server_shared_array_is_the_loaded_array() -> None:
    loaded = np.ones(3)
    assert pb_utils.shared_array("w", lambda: loaded) is loaded


def test_custom_metrics_and_model_loading_need_a_server() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="Convoy serves"):
        pb_utils.MetricFamily("seen", "requests seen", pb_utils.MetricFamily.COUNTER)
    with pytest.raises(pb_utils.TritonModelException, match="Convoy serves"):
        pb_utils.is_model_ready("simple")
    with pytest.raises(pb_utils.TritonModelException, match="COUNTER, GAUGE or HISTOGRAM"):
        pb_utils.MetricFamily("seen", "requests seen", "summary")
