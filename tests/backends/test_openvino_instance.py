"""`OpenVinoInstance` driven directly: Triton's parameters reach the compiled model, a batching
model's first dimension becomes dynamic, a file OpenVINO cannot read is a load error, and
threads first using OpenVINO at once in a fresh process (parallel loads) do not deadlock."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format

from backends import ModelLoadError, OpenVinoInstance
from proto import model_config_pb2 as mc
from scripts import framework_models, models
from tests.extras import require_extra

require_extra("openvino", "openvino")


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m"\n{text}', mc.ModelConfig())


@pytest.fixture(scope="module")
def simple_xml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`simple` as IR with its batch dimension fixed at 1 (as many exported models have it)."""
    work = tmp_path_factory.mktemp("ov")
    model = models.simple()
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save_model(model, work / "simple.onnx")
    return framework_models.save_openvino_ir(work / "simple.onnx", work / "model.xml")


def test_parameters_reach_the_compiled_model(simple_xml: Path) -> None:
    config = _config(
        'parameters { key: "NUM_STREAMS" value: { string_value: "1" } }\n'
        'parameters { key: "PERFORMANCE_HINT" value: { string_value: "THROUGHPUT" } }\n'
        'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }\n'
        'parameters { key: "INFERENCE_PRECISION_HINT" value: { string_value: "f32" } }\n'
        'parameters { key: "ENABLE_CPU_PINNING" value: { string_value: "NO" } }\n'
    )
    instance = OpenVinoInstance.load("m_1_0", simple_xml, config)
    try:
        assert instance.compiled_property("NUM_STREAMS") == "1"
        assert instance.compiled_property("PERFORMANCE_HINT") == "THROUGHPUT"
        assert instance.compiled_property("INFERENCE_NUM_THREADS") == "1"
        assert "float32" in instance.compiled_property("INFERENCE_PRECISION_HINT")
        assert instance.compiled_property("ENABLE_CPU_PINNING") == "False"
    finally:
        instance.close()


def test_a_batching_model_takes_any_batch_size(simple_xml: Path) -> None:
    instance = OpenVinoInstance.load("m_1_0", simple_xml, _config("max_batch_size: 8"))
    try:
        assert instance.signature.inputs[0].shape == (-1, 16)  # the file said 1
        a = np.ones((3, 16), np.float32)
        b = np.full((2, 16), 2, np.float32)
        result = asyncio.run(
            instance.execute([{"INPUT0": a, "INPUT1": a}, {"INPUT0": b, "INPUT1": b}])
        )
        np.testing.assert_array_equal(result.responses[0]["OUTPUT0"], a * 2)
        np.testing.assert_array_equal(result.responses[1]["OUTPUT1"], np.zeros((2, 16)))
    finally:
        instance.close()


def test_a_file_openvino_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "model.xml"
    path.write_text("<net", encoding="utf-8")
    with pytest.raises(ModelLoadError, match="model 'm': OpenVINO cannot read"):
        OpenVinoInstance.load("m_1_0", path, _config(""))


# Four threads reach OpenVINO's binding at once, first thing in a fresh process, as parallel
# model loads and instances' first batches do: its first NumPy use from two threads at once
# deadlocked (about one process in three here) unless `import_openvino` had made it.
_FIRST_USES = """
import threading
import openvino
from backends.openvino import import_openvino
barrier = threading.Barrier(4)
def first_use(index):
    barrier.wait()
    ov = import_openvino()
    (ov.Type.f32 if index % 2 else ov.Type.i64).to_dtype()
threads = [threading.Thread(target=first_use, args=(index,)) for index in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""


def test_threads_first_using_openvino_at_once_do_not_deadlock() -> None:
    runs = [subprocess.Popen([sys.executable, "-c", _FIRST_USES]) for _ in range(6)]
    try:
        codes = [run.wait(timeout=60) for run in runs]
    finally:
        for run in runs:
            run.kill()
    assert codes == [0] * len(runs)
