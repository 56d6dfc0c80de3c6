"""Decoupled python models: responses stream through the sender; every request ends once."""

import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from backends import BackendError, ExecutionError
from backends.python import PythonInstance, PythonSettings
from proto import model_config_pb2 as mc

CONFIG = """
max_batch_size: 0
model_transaction_policy { decoupled: true }
input { name: "N" data_type: TYPE_INT32 dims: [1] }
output { name: "I" data_type: TYPE_INT32 dims: [1] }
parameters { key: "convoy_execute_timeout_s" value { string_value: "1" } }
"""

# Request with N = n streams n responses (I = 0..n-1) from a thread, then the final flag alone;
# N = -1 never sends its final flag; N = -2 sends after its final flag.
STREAMING = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            sender = request.get_response_sender()
            if n == -1:
                continue
            if n == -2:
                sender.send(flags=FINAL)
                sender.send(flags=FINAL)
            threading.Thread(target=self.stream, args=(sender, n)).start()
        return None

    def stream(self, sender, n):
        for i in range(n):
            tensor = pb_utils.Tensor("I", np.array([i], np.int32))
            sender.send(pb_utils.InferenceResponse([tensor]))
        sender.send(flags=FINAL)
"""

Sent = list[tuple[int, object, bool]]


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[PythonInstance]:
    yield from _load(tmp_path, "streaming", STREAMING, CONFIG)


def _load(tmp_path: Path, name: str, source: str, config_text: str) -> Iterator[PythonInstance]:
    model_dir = tmp_path / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    config = text_format.Parse(config_text, mc.ModelConfig(name=name, backend="python"))
    loaded = PythonInstance.load(
        f"{name}_0", model_dir, 1, config, PythonSettings.from_config(config)
    )
    yield loaded
    loaded.close()


async def _stream(instance: PythonInstance, *counts: int) -> Sent:
    sent: Sent = []
    requests = [{"N": np.array([n], np.int32)} for n in counts]
    result = await instance.execute_decoupled(
        requests, lambda index, response, final: sent.append((index, response, final))
    )
    assert result.responses == [{}] * len(counts) and not result.rescheduled
    return sent


def _values(sent: Sent, index: int) -> list[object]:
    return [r["I"].tolist() if isinstance(r, dict) else r for i, r, _ in sent if i == index]


async def test_streams_responses_then_a_bare_final_flag(instance: PythonInstance) -> None:
    sent = await _stream(instance, 3, 0)
    assert _values(sent, 0) == [[0], [1], [2], None]
    assert [final for i, _, final in sent if i == 0] == [False, False, False, True]
    assert [(r, final) for i, r, final in sent if i == 1] == [(None, True)]


async def test_missing_final_flag_times_out_and_the_instance_recovers(
    instance: PythonInstance,
) -> None:
    sent = await _stream(instance, 2, -1)
    assert _values(sent, 0) == [[0], [1], None]
    ((_, error, final),) = [s for s in sent if s[0] == 1]
    assert final and isinstance(error, ExecutionError)
    assert "did not return within 1 s; the worker was restarted" in str(error)
    assert _values(await _stream(instance, 1), 0) == [[0], None]


async def test_sending_after_the_final_flag_fails_the_rest_of_the_batch(
    instance: PythonInstance,
) -> None:
    sent = await _stream(instance, -2, 5)
    assert sent[0] == (0, None, True)
    (rest,) = [s for s in sent if s[0] == 1]  # execute raised before request 1 started
    assert rest[2] and isinstance(rest[1], ExecutionError)
    assert "TritonModelException" in str(rest[1]) and "closed" in str(rest[1])


async def test_unary_and_streaming_paths_are_not_mixed(
    instance: PythonInstance, tmp_path: Path
) -> None:
    with pytest.raises(ExecutionError, match="decoupled"):
        await instance.execute([{"N": np.array([1], np.int32)}])
    returns_list = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    for wrong in _load(tmp_path, "returns", returns_list, CONFIG):
        sent = await _stream(wrong, 1)
        errors = [r for _, r, final in sent if isinstance(r, BackendError) and final]
        assert len(errors) == 1 and "must return None" in str(errors[0])
    coupled = CONFIG.replace("model_transaction_policy { decoupled: true }", "")
    sends = STREAMING.replace(
        "threading.Thread(target=self.stream, args=(sender, n)).start()", "self.stream(sender, n)"
    )
    for unary in _load(tmp_path, "coupled", sends, coupled):
        (error,) = (await unary.execute([{"N": np.array([1], np.int32)}])).responses
        assert isinstance(error, ExecutionError) and "decoupled: true" in str(error)


# An iterative sequence's decoupled model: a request's first run sends I = -1 and is rescheduled
# (no final flag yet); its next run reports whether the first run's sender still sent (1) or
# refused (0), and ends the request.
RESCHEDULING = """
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

def answer(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("I", np.array([value], np.int32))])

class TritonPythonModel:
    earlier = None

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if self.earlier is None:
                self.earlier = sender
                sender.send(answer(-1))
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                continue
            try:
                self.earlier.send(answer(-2))
                still_sent = 1
            except pb_utils.TritonModelException:
                still_sent = 0
            sender.send(answer(still_sent), flags=FINAL)
        return None
"""


async def test_a_rescheduled_request_ends_its_run_without_a_final_flag(tmp_path: Path) -> None:
    config = CONFIG + "sequence_batching { iterative_sequence: true }\n"

    async def run(instance: PythonInstance) -> tuple[Sent, frozenset[int]]:
        sent: Sent = []
        result = await instance.execute_decoupled(
            [{"N": np.array([0], np.int32)}], lambda *each: sent.append(each)
        )
        return sent, result.rescheduled

    for instance in _load(tmp_path, "rescheduling", RESCHEDULING, config):
        first, rescheduled = await run(instance)
        assert _values(first, 0) == [[-1]] and rescheduled == {0}
        assert [final for _, _, final in first] == [False]
        second, rescheduled = await run(instance)
        # The first run's sender was closed once its request was rescheduled.
        assert _values(second, 0) == [[0]] and not rescheduled
        assert [final for _, _, final in second] == [True]
