"""scripts/python_bench.py's repository: the ONNX backend's mlp and two python models over the same
file, one in its own process and one in the server's, with the session options asked for."""

from pathlib import Path

from proto import model_config_pb2 as mc
from scripts import python_bench
from server.core.repository import parse_config


def _config(repo: Path, name: str) -> mc.ModelConfig:
    return parse_config((repo / name / "config.pbtxt").read_text(), name)


def test_the_three_models_share_the_onnx_models_io_and_batching(tmp_path: Path) -> None:
    repo = python_bench.build_repository(tmp_path, one_thread=True)
    onnx = _config(repo, python_bench.ONNX_MODEL)
    for name in python_bench.PYTHON_MODELS:
        config = _config(repo, name)
        assert config.backend == "python"
        assert list(config.input) == list(onnx.input) and list(config.output) == list(onnx.output)
        assert config.dynamic_batching == onnx.dynamic_batching
        placed = config.parameters.get("convoy_in_process")
        in_process = placed is not None and placed.string_value == "true"
        assert in_process == name.endswith("in_process")
        assert (repo / name / "1" / "mlp.onnx").stat().st_size > 0
        source = (repo / name / "1" / "model.py").read_text()
        assert "options.intra_op_num_threads = 1" in source
        compile(source, "model.py", "exec")
