"""Python model instances with real worker processes: batches, errors, timeouts and restarts."""

import asyncio
import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format

from backends import Device, ExecutionError, ModelLoadError
from backends.python import PythonInstance, PythonSettings
from proto import model_config_pb2 as mc

BATCHED = """
max_batch_size: 8
input { name: "IN" data_type: TYPE_FP32 dims: [2] }
output { name: "SUM" data_type: TYPE_FP32 dims: [2] }
output { name: "COUNT" data_type: TYPE_INT64 dims: [1] }
"""

# Doubles IN into SUM; COUNT is how many requests the execute call got. IN's first value steers
# the failure cases: 1 hangs, 2 exits the process, 3 raises, 4 sends a TritonError, 7 is killed;
# 8 takes 0.3 s.
STEERED = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        with open(os.path.join(args["model_repository"], "initialized"), "a") as f:
            f.write("x")

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x.flat[0] == 1:
                time.sleep(60)
            if x.flat[0] == 2:
                os._exit(3)
            if x.flat[0] == 3:
                raise ValueError("three is not allowed")
            if x.flat[0] == 7:
                os.kill(os.getpid(), 9)
            if x.flat[0] == 8:
                time.sleep(0.3)
            if x.flat[0] == 4:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("no 4s")))
                continue
            count = np.full((x.shape[0], 1), len(requests), np.int64)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SUM", x * 2), pb_utils.Tensor("COUNT", count)]))
        return responses
"""

Loader = Callable[..., PythonInstance]


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Loader]:
    """Writes models/<name>/1/model.py and config, loads instance `<name>_0`; closes them all."""
    loaded: list[PythonInstance] = []

    def _load(name: str, source: str, config_text: str = BATCHED) -> PythonInstance:
        model_dir = tmp_path / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
        config = text_format.Parse(config_text, mc.ModelConfig(name=name, backend="python"))
        settings = PythonSettings.from_config(config)
        instance = PythonInstance.load(f"{name}_0", model_dir, 1, config, settings)
        loaded.append(instance)
        return instance

    yield _load
    for instance in loaded:
        instance.close()


def _rows(*firsts: float) -> list[dict[str, np.ndarray]]:
    """One request per value, each with that many rows starting with the value."""
    return [{"IN": np.full((max(1, int(v)), 2), v, np.float32)} for v in firsts]


def _timeout(seconds: float | str) -> str:
    return f'parameters {{ key: "convoy_execute_timeout_s" value {{ string_value: "{seconds}" }} }}'


async def test_execute_gets_the_batch_as_a_list_and_answers_each_request(load: Loader) -> None:
    instance = load("steered", STEERED)
    assert instance.name == "steered_0"
    assert instance.signature.inputs[0].shape == (-1, 2)
    assert instance.signature.outputs[1].data_type == mc.TYPE_INT64
    requests = [{"IN": np.arange(2 * n, dtype=np.float32).reshape(n, 2) + 5} for n in (1, 2, 3)]
    result = await instance.execute(requests)
    for request, response in zip(requests, result.responses, strict=True):
        assert isinstance(response, dict)
        np.testing.assert_array_equal(response["SUM"], request["IN"] * 2)
        assert response["COUNT"].tolist() == [[3]] * len(request["IN"])
    assert result.compute_input_ns > 0 and result.compute_infer_ns > 0


async def test_triton_error_fails_only_its_request(load: Loader) -> None:
    result = await load("steered", STEERED).execute(_rows(5, 4, 6))
    first, failed, last = result.responses
    assert isinstance(first, dict) and isinstance(last, dict)
    assert isinstance(failed, ExecutionError) and str(failed) == "no 4s"


async def test_exception_fails_the_batch_and_the_next_batch_works(load: Loader) -> None:
    instance = load("steered", STEERED)
    result = await instance.execute(_rows(5, 3))
    assert all(isinstance(r, ExecutionError) for r in result.responses)
    assert "execute raised ValueError: three is not allowed" in str(result.responses[0])
    assert "'steered'" in str(result.responses[0])
    result = await instance.execute(_rows(5))
    assert isinstance(result.responses[0], dict)


async def test_hang_times_out_restarts_and_never_blocks_the_loop(
    load: Loader, tmp_path: Path
) -> None:
    instance = load("steered", STEERED, BATCHED + _timeout(1))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.create_task(tick())
    with pytest.raises(
        ExecutionError, match=r"did not return within 1 s; the worker was restarted"
    ):
        await instance.execute(_rows(1))
    ticker.cancel()
    assert ticks >= 10  # the loop kept running while the worker hung
    assert (tmp_path / "steered" / "initialized").read_text() == "xx"  # initialize ran again
    result = await instance.execute(_rows(5))
    assert isinstance(result.responses[0], dict)


async def test_worker_exit_fails_the_batch_and_restarts(load: Loader) -> None:
    instance = load("steered", STEERED)
    with pytest.raises(ExecutionError, match=r"exited with code 3 during execute; the worker was"):
        await instance.execute(_rows(5, 2))
    with pytest.raises(ExecutionError, match=r"exited with code -9 \(SIGKILL\) during execute"):
        await instance.execute(_rows(7))
    result = await instance.execute(_rows(6))
    assert isinstance(result.responses[0], dict)


async def test_a_batch_whose_caller_left_is_answered_before_the_next(load: Loader) -> None:
    instance = load("steered", STEERED)
    left = asyncio.ensure_future(instance.execute(_rows(8, 8, 8)))
    await asyncio.sleep(0.1)
    left.cancel()
    result = await instance.execute(_rows(5, 6))
    assert [r["SUM"][0, 0] for r in result.responses if isinstance(r, dict)] == [10, 12]
    assert [r["COUNT"][0, 0] for r in result.responses if isinstance(r, dict)] == [2, 2]


async def test_close_lets_the_batch_in_flight_finish_then_refuses(load: Loader) -> None:
    instance = load("steered", STEERED)
    running = asyncio.ensure_future(instance.execute(_rows(8)))  # takes 0.3 s
    await asyncio.sleep(0.05)
    await asyncio.to_thread(instance.close)
    result = await running
    assert isinstance(result.responses[0], dict) and result.responses[0]["SUM"][0, 0] == 16
    with pytest.raises(ExecutionError, match="the instance is closed"):
        await instance.execute(_rows(5))


CHECKED = """
max_batch_size: 0
input { name: "MODE" data_type: TYPE_INT32 dims: [1] }
output { name: "F" data_type: TYPE_FP32 dims: [2] }
output { name: "S" data_type: TYPE_STRING dims: [2] }
"""

# MODE 0: right; 1: S missing; 2: F as float64; 3: F as int16 (safe); 4: an undeclared output.
MISBEHAVING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            f = np.array([1, 2], {2: np.float64, 3: np.int16}.get(mode, np.float32))
            tensors = [pb_utils.Tensor("F", f)]
            if mode != 1:
                tensors.append(pb_utils.Tensor("S", np.array(["é", b"\\xff"], dtype=object)))
            if mode == 4:
                tensors.append(pb_utils.Tensor("EXTRA", f))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
"""


async def test_outputs_are_checked_against_the_config(load: Loader) -> None:
    instance = load("checked", MISBEHAVING, CHECKED)
    modes = [{"MODE": np.array([m], np.int32)} for m in range(5)]
    right, missing, unsafe, safe, extra = (await instance.execute(modes)).responses
    assert isinstance(right, dict)
    assert right["F"].dtype == np.float32
    assert right["S"].dtype == object and right["S"].tolist() == ["é".encode(), b"\xff"]
    assert isinstance(missing, ExecutionError)
    assert "missing output 'S'" in str(missing)
    assert isinstance(unsafe, ExecutionError)
    assert "'F'" in str(unsafe) and "float64" in str(unsafe) and "TYPE_FP32" in str(unsafe)
    assert isinstance(safe, dict) and safe["F"].dtype == np.float32
    assert isinstance(extra, ExecutionError) and "'EXTRA'" in str(extra)


# Every request of a batch answers the same names and dtypes (set by the batch's first value:
# 1 safe casts, 2 an unsafe one), so the batch's outputs travel stacked, one array per name.
UNIFORM = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        first = inputs[0].flat[0]
        floats = np.float16 if first == 1 else np.float64 if first == 2 else np.float32
        ints = np.int32 if first == 1 else np.int64
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", (x * 2).astype(floats)),
                pb_utils.Tensor("COUNT", np.full((x.shape[0], 1), len(requests), ints)),
            ])
            for x in inputs
        ]
"""


async def test_a_batchs_stacked_outputs_are_checked_once_for_all_its_requests(
    load: Loader,
) -> None:
    instance = load("uniform", UNIFORM)
    for firsts in ((5, 6, 7), (1, 1, 1)):  # as declared, then safely cast (FP16, INT32)
        requests = _rows(*firsts)
        responses = (await instance.execute(requests)).responses
        for request, response in zip(requests, responses, strict=True):
            assert isinstance(response, dict)
            assert response["SUM"].dtype == np.float32 and response["COUNT"].dtype == np.int64
            np.testing.assert_array_equal(response["SUM"], request["IN"] * 2)
            assert response["COUNT"].tolist() == [[3]] * len(request["IN"])
    unsafe = (await instance.execute(_rows(2, 3))).responses  # FP64 where FP32 is declared
    assert all(isinstance(response, ExecutionError) for response in unsafe)
    assert "'SUM'" in str(unsafe[0]) and "float64" in str(unsafe[0])
    assert unsafe[0] is not unsafe[1]  # each request fails with an error of its own


async def test_bytes_in_and_out(load: Loader) -> None:
    source = """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                assert text.dtype == object and all(type(t) is bytes for t in text.flat)
                reversed_ = np.array([t[::-1] for t in text.flat], dtype=object)
                out = pb_utils.Tensor("REVERSED", reversed_.reshape(text.shape))
                responses.append(pb_utils.InferenceResponse([out]))
            return responses
    """
    config = """
    max_batch_size: 4
    input { name: "TEXT" data_type: TYPE_STRING dims: [-1] }
    output { name: "REVERSED" data_type: TYPE_STRING dims: [-1] }
    """
    instance = load("bytes", source, config)
    first = np.array([[b"abc", b"\xff\x00", b""]], dtype=object)
    second = np.array([[b"x"], [b"yz"]], dtype=object)
    one, two = (await instance.execute([{"TEXT": first}, {"TEXT": second}])).responses
    assert isinstance(one, dict) and isinstance(two, dict)
    assert one["REVERSED"].tolist() == [[b"cba", b"\x00\xff", b""]]
    assert two["REVERSED"].tolist() == [[b"x"], [b"zy"]]


async def test_wrong_return_values_fail_the_batch(load: Loader) -> None:
    source = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            if len(requests) == 1:
                return ["not a response"]
            return [pb_utils.InferenceResponse([])]
    """
    instance = load("wrong", source, CHECKED)
    modes = [{"MODE": np.array([0], np.int32)}] * 2
    (error,) = (await instance.execute(modes[:1])).responses
    assert isinstance(error, ExecutionError) and "InferenceResponse" in str(error)
    errors = (await instance.execute(modes)).responses
    assert all(isinstance(e, ExecutionError) for e in errors)
    assert "got 2 requests and returned 1 responses" in str(errors[0])


async def test_initialize_gets_tritons_args(load: Loader, tmp_path: Path) -> None:
    source = """
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.args = args
            config = json.loads(args["model_config"])
            out = pb_utils.get_output_config_by_name(config, "S")
            self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])
            self.shape = np.zeros(out["dims"]).shape  # dims are numbers, as in Triton

        def execute(self, requests):
            text = json.dumps(self.args)
            s = np.array([text, str(self.shape)], dtype=self.dtype)
            f = pb_utils.Tensor("F", np.zeros(2, np.float32))
            return [pb_utils.InferenceResponse([f, pb_utils.Tensor("S", s)]) for _ in requests]
    """
    params = 'parameters { key: "greeting" value { string_value: "hi" } }'
    instance = load("args", source, CHECKED + params)
    (response,) = (await instance.execute([{"MODE": np.array([0], np.int32)}])).responses
    assert isinstance(response, dict)
    text, shape = response["S"].tolist()
    assert shape == b"(2,)"
    args = json.loads(text)
    assert args["model_name"] == "args"
    assert args["model_instance_name"] == "args_0"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_version"] == "1"
    assert args["model_repository"] == str(tmp_path / "args")
    config = json.loads(args["model_config"])
    assert config["parameters"]["greeting"]["string_value"] == "hi"
    assert config["max_batch_size"] == 0  # fields at their default are there too
    assert config["input"][0]["dims"] == [1]


async def test_a_gpu_instance_is_told_its_device(tmp_path: Path) -> None:
    """A KIND_GPU instance's initialize args name the GPU, as Triton's do; its model's own code
    puts work there (this one does not touch CUDA, so it runs without a GPU)."""
    source = """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.place = [args["model_instance_kind"], args["model_instance_device_id"]]

        def execute(self, requests):
            s = np.array(self.place, dtype=np.object_)
            f = pb_utils.Tensor("F", np.zeros(2, np.float32))
            return [pb_utils.InferenceResponse([f, pb_utils.Tensor("S", s)]) for _ in requests]
    """
    model_dir = tmp_path / "gpu"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    config = text_format.Parse(CHECKED, mc.ModelConfig(name="gpu", backend="python"))
    settings = PythonSettings.from_config(config)
    instance = await asyncio.to_thread(
        PythonInstance.load, "gpu_0", model_dir, 1, config, settings, device=Device.cuda(1)
    )
    try:
        (response,) = (await instance.execute([{"MODE": np.array([0], np.int32)}])).responses
        assert isinstance(response, dict) and response["S"].tolist() == [b"GPU", b"1"]
        assert instance.device == Device.cpu()  # its tensors are host arrays all the same
    finally:
        instance.close()


async def test_async_execute_is_awaited(load: Loader) -> None:
    source = """
    import asyncio
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        async def execute(self, requests):
            await asyncio.sleep(0)
            f = pb_utils.Tensor("F", np.ones(2, np.float32))
            s = pb_utils.Tensor("S", np.array([b"a", b"b"], dtype=object))
            return [pb_utils.InferenceResponse([f, s]) for _ in requests]
    """
    instance = load("async", source, CHECKED)
    (response,) = (await instance.execute([{"MODE": np.array([0], np.int32)}])).responses
    assert isinstance(response, dict) and response["F"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("source", "config_text", "message"),
    [
        (
            "class TritonPythonModel:\n    def initialize(self, args):\n        raise "
            "RuntimeError('no weights')\n",
            BATCHED,
            r"model 'broken' version 1 instance 'broken_0': initialize raised RuntimeError: no "
            r"weights",
        ),
        ("class Other:\n    pass\n", BATCHED, "defines no class TritonPythonModel"),
        ("import not_a_module_anywhere\n", BATCHED, "ModuleNotFoundError"),
        ("import os\nos._exit(7)\n", BATCHED, "exited with code 7 before initialize returned"),
        (
            "import time\nclass TritonPythonModel:\n    def initialize(self, args):\n"
            "        time.sleep(60)\n",
            BATCHED
            + 'parameters { key: "convoy_initialize_timeout_s" value { string_value: "1" } }',
            "initialize did not return within 1 s",
        ),
        (
            STEERED,
            BATCHED.replace("TYPE_FP32 dims: [2] }\noutput", "TYPE_BF16 dims: [2] }\noutput"),
            "BF16",
        ),
        (STEERED, BATCHED + _timeout(0), "convoy_execute_timeout_s"),
        (STEERED, BATCHED + _timeout("soon"), "convoy_execute_timeout_s"),
    ],
)
def test_load_failures_are_model_load_errors(
    load: Loader, source: str, config_text: str, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load("broken", source, config_text)


def test_missing_model_file_is_a_model_load_error(tmp_path: Path) -> None:
    config = mc.ModelConfig(name="absent", backend="python")
    with pytest.raises(
        ModelLoadError, match=r"model 'absent' version 1: .*model\.py' does not exist"
    ):
        PythonInstance.load("absent_0", tmp_path / "absent", 1, config, PythonSettings())


async def test_close_runs_finalize_and_is_bounded(load: Loader, tmp_path: Path) -> None:
    source = """
    import os
    import time

    class TritonPythonModel:
        def initialize(self, args):
            self.directory = args["model_repository"]

        def execute(self, requests):
            return []

        def finalize(self):
            open(os.path.join(self.directory, "finalized"), "w").close()
            if os.path.exists(os.path.join(self.directory, "hang")):
                time.sleep(60)
    """
    load("tidy", source).close()
    assert (tmp_path / "tidy" / "finalized").exists()
    (tmp_path / "stuck").mkdir()
    (tmp_path / "stuck" / "hang").touch()
    stuck = load("stuck", source, BATCHED + _timeout(1))
    loop = asyncio.get_running_loop()
    start = loop.time()
    stuck.close()
    assert loop.time() - start < 5
    assert (tmp_path / "stuck" / "finalized").exists()
    with pytest.raises(ExecutionError, match="closed"):
        await stuck.execute(_rows(5))


SLEEPER = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()),
                pb_utils.Tensor("COUNT", np.zeros((1, 1), np.int64)),
            ])
            for r in requests
        ]
"""
IN_PROCESS = 'parameters { key: "convoy_in_process" value { string_value: "true" } }'


@pytest.mark.parametrize("where", ["worker", "in process"])
async def test_execute_time_is_counted_as_inference_in_either_mode(
    load: Loader, where: str
) -> None:
    config = BATCHED + (IN_PROCESS if where == "in process" else "")
    result = await load("sleeper", SLEEPER, config).execute(_rows(1))
    assert result.compute_infer_ns >= 50_000_000
    assert result.compute_input_ns < 25_000_000, "execute's time is not the input's"


# An iterative sequence's model: MODE 0 answers, 1 is rescheduled (None in the list), 2 is
# rescheduled and answered all the same.
RESCHEDULING = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            out = pb_utils.Tensor("OUT", np.array([mode], np.int32))
            responses.append(None if mode == 1 else pb_utils.InferenceResponse([out]))
        return responses
"""


async def test_a_rescheduled_request_answers_nothing_until_a_later_run(load: Loader) -> None:
    config = """
    max_batch_size: 0
    input { name: "MODE" data_type: TYPE_INT32 dims: [1] }
    output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
    sequence_batching { iterative_sequence: true }
    """
    instance = load("rescheduling", RESCHEDULING, textwrap.dedent(config))
    modes = [{"MODE": np.array([mode], np.int32)} for mode in (0, 1, 0)]
    result = await instance.execute(modes)
    assert result.rescheduled == {1}
    assert [r if not r else r["OUT"].tolist() for r in result.responses] == [[0], {}, [0]]
    (error,) = (await instance.execute([{"MODE": np.array([2], np.int32)}])).responses
    assert isinstance(error, ExecutionError) and "must be None, not InferenceResponse" in str(error)


# COUNT says where execute ran: 1 on the event loop's thread (the test's main thread), 0 on the
# instance's. An IN of 9 calls another model first, and raises the call's error; 10 does it
# from a thread of its own, which execute waits for.
WHERE = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

def call_other():
    return pb_utils.InferenceRequest(
        model_name="other", requested_output_names=["OUT"], inputs=[]
    ).exec()

class TritonPythonModel:
    def execute(self, requests):
        on_loop = threading.current_thread() is threading.main_thread()
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x.flat[0] in (9, 10):
                called = []
                if x.flat[0] == 9:
                    called.append(call_other())
                else:
                    aside = threading.Thread(target=lambda: called.append(call_other()))
                    aside.start()
                    aside.join()
                if called[0].has_error():
                    raise pb_utils.TritonModelException(called[0].error().message())
            count = np.full((x.shape[0], 1), int(on_loop), np.int64)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SUM", x * 2), pb_utils.Tensor("COUNT", count)]))
        return responses
"""
INLINE = 'parameters { key: "convoy_inline_execute" value { string_value: "true" } }'


async def _where_it_ran(instance: PythonInstance, batches: int) -> list[int]:
    """Run `batches` batches of one request one after another: 1 for each that ran inline."""
    ran = []
    for _ in range(batches):
        (response,) = (await instance.execute(_rows(5))).responses
        assert isinstance(response, dict)
        np.testing.assert_array_equal(response["SUM"], np.full((5, 2), 10, np.float32))
        ran.append(int(response["COUNT"][0, 0]))
    return ran


@pytest.mark.parametrize("inline", [False, True])
async def test_a_fast_execute_runs_on_the_event_loop_only_when_asked(
    load: Loader, inline: bool
) -> None:
    instance = load("where", WHERE, BATCHED + IN_PROCESS + (INLINE if inline else ""))
    ran = await _where_it_ran(instance, 30)
    if not inline:
        assert ran == [0] * 30, "without the parameter execute stays on the instance's thread"
        return
    assert ran[:8] == [0] * 8, "measured on the thread first"
    assert ran[-10:] == [1] * 10, "then inline"


@pytest.mark.parametrize("steer", [9, 10], ids=["from execute", "from a thread it waits for"])
async def test_an_inline_execute_that_calls_the_server_goes_back_to_its_thread(
    load: Loader, steer: int
) -> None:
    instance = load("where", WHERE, BATCHED + IN_PROCESS + INLINE)
    assert (await _where_it_ran(instance, 20))[-1] == 1
    (error,) = (await instance.execute(_rows(steer))).responses
    assert isinstance(error, ExecutionError)
    assert "execute ran on the server's event loop (convoy_inline_execute)" in str(error)
    assert await _where_it_ran(instance, 20) == [0] * 20, "never inline again"


@pytest.mark.parametrize(
    ("source", "config", "message"),
    [
        (WHERE, BATCHED + INLINE, "only a model in the server's process can do"),
        (
            WHERE,
            BATCHED + IN_PROCESS + INLINE + " model_transaction_policy { decoupled: true }",
            "a decoupled model's execute runs on a thread of its own",
        ),
        (
            WHERE.replace("    def execute(", "    async def execute("),
            BATCHED + IN_PROCESS + INLINE,
            "an `async def execute` cannot run its own",
        ),
    ],
)
def test_inline_execute_is_refused_where_it_cannot_run(
    load: Loader, source: str, config: str, message: str
) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load("where", source, config)
