"""scripts/python_bench.py's repositories: the ONNX backend's mlp and three python models over the
same file, one in its own process and two in the server's (one of them inline), with the session
options asked for; Triton's the same model.py."""

from pathlib import Path

from proto import model_config_pb2 as mc
from scripts import python_bench
from server.core.repository import parse_config


def _config(repo: Path, name: str) -> mc.ModelConfig:
    return parse_config((repo / name / "config.pbtxt").read_text(), name)


def test_the_models_share_the_onnx_models_io_batching_and_file(tmp_path: Path) -> None:
    repo = python_bench.build_repository(tmp_path, one_thread=True)
    triton = python_bench._triton_repository(tmp_path / "triton", tmp_path / "mlp.onnx", True)
    onnx = _config(repo, python_bench.ONNX_MODEL)
    sources = []
    for folder, name in [(repo, n) for n in python_bench.PYTHON_MODELS] + [(triton, "mlp_python")]:
        config = _config(folder, name)
        assert config.name == name and config.backend == "python"
        assert list(config.input) == list(onnx.input) and list(config.output) == list(onnx.output)
        assert config.dynamic_batching == onnx.dynamic_batching
        asked = {key: value.string_value for key, value in config.parameters.items()}
        assert (asked.get("convoy_in_process") == "true") == (name != "mlp_python")
        assert (asked.get("convoy_inline_execute") == "true") == name.endswith("inline")
        source = (folder / name / "1" / "model.py").read_text()
        assert str(tmp_path / "mlp.onnx") in source
        assert "options.intra_op_num_threads = 1" in source
        compile(source, "model.py", "exec")
        sources.append(source)
    assert len(set(sources)) == 1  # the same model.py everywhere
