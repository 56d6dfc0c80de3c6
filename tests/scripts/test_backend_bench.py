"""scripts/backend_bench.py's configs: one per backend, alike but for the backend and the
max_batch_size each server is given, and each one a config the server reads."""

import argparse
from pathlib import Path

import pytest
from google.protobuf import text_format

from proto import model_config_pb2 as mc
from scripts import backend_bench, triton_live


@pytest.mark.parametrize("backend", list(backend_bench.BACKENDS))
def test_each_backend_gets_the_batch_size_it_is_served_with(tmp_path: Path, backend: str) -> None:
    model = tmp_path / backend_bench.model_name(backend)
    model.mkdir()
    backend_bench.write_config(tmp_path, backend, 8)
    text = (model / "config.pbtxt").read_text()
    config = text_format.Parse(text, mc.ModelConfig())
    _line, _file, input_name, output_name = backend_bench.BACKENDS[backend]
    assert config.max_batch_size == 8
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert [i.name for i in config.input] == [input_name]
    assert [o.name for o in config.output] == [output_name]
    assert [(g.count, g.kind) for g in config.instance_group] == [
        (1, mc.ModelInstanceGroup.KIND_CPU)
    ]
    assert (config.backend or config.platform) in {"onnxruntime", "pytorch_libtorch", "openvino"}


@pytest.mark.parametrize("backend", list(backend_bench.BACKENDS))
def test_triton_serves_each_backend_model_through_its_python_backend(
    tmp_path: Path, backend: str
) -> None:
    model = tmp_path / "convoy" / backend_bench.model_name(backend)
    model.mkdir(parents=True)
    backend_bench.write_config(tmp_path / "convoy", backend, 8)
    model_file = model / "1" / backend_bench.BACKENDS[backend][1]
    config = (model / "config.pbtxt").read_text()
    triton = tmp_path / "triton"
    triton_live.write_model(triton, model.name, config, model_file, backend)
    served = text_format.Parse((triton / model.name / "config.pbtxt").read_text(), mc.ModelConfig())
    assert (served.backend, served.platform, served.max_batch_size) == ("python", "", 8)
    source = (triton / model.name / "1" / "model.py").read_text()
    compile(source, "model.py", "exec")  # the framework's lines sit in initialize as written
    assert repr(str(model_file)) in source


def test_a_server_measured_twice_at_a_step_has_the_mean_of_what_was_measured() -> None:
    rows = [("convoy", "wire", 32, 40.0, 900.0, 7.5), ("convoy", "wire", 32, 50.0, 700.0, 8.0)]
    assert backend_bench.mean_row(rows) == ("convoy", "wire", 32, 45.0, 800.0, 7.75)
    failed = [("convoy", "shm", 8, None, None, None), ("convoy", "shm", 8, 30.0, 200.0, 4.0)]
    assert backend_bench.mean_row(failed) == ("convoy", "shm", 8, 30.0, 200.0, 4.0)
    assert backend_bench.mean_row(failed[:1]) == ("convoy", "shm", 8, None, None, None)


def test_each_step_has_the_mean_of_the_ceilings_measured_around_it(tmp_path: Path) -> None:
    rates = iter([50.0, 60.0, 40.0, 44.0])  # the framework alone: before and after each step
    args = argparse.Namespace(concurrency=[8], inputs=["wire", "shm"], window_ms=100)
    servers: list[tuple[str, str | None]] = [("convoy", None), ("triton", None)]  # not started
    rows, steps = backend_bench.measure(servers, "m", args, tmp_path, lambda: (8, next(rates)))
    assert steps == {("wire", 8): 55.0, ("shm", 8): 42.0}
    assert [row[:3] for row in rows] == [
        ("convoy", "wire", 8),
        ("convoy", "shm", 8),
        ("triton", "wire", 8),
        ("triton", "shm", 8),
    ]
