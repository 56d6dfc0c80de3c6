"""scripts/hotpath_bench.py: its repository serves mlp with and without the seed's batching."""

from pathlib import Path

from google.protobuf import text_format

from proto import model_config_pb2 as mc
from scripts import hotpath_bench


def test_the_repository_has_mlp_with_and_without_the_seeds_batching(tmp_path: Path) -> None:
    repo = hotpath_bench.build_repository(tmp_path)
    configs = {
        name: text_format.Parse((repo / name / "config.pbtxt").read_text(), mc.ModelConfig())
        for name in ("mlp_off", "mlp_on")
    }
    assert not configs["mlp_off"].HasField("dynamic_batching")
    batching = configs["mlp_on"].dynamic_batching
    assert list(batching.preferred_batch_size) == [8, 16]
    assert batching.max_queue_delay_microseconds == 2000
    assert (repo / "mlp_on" / "1" / "model.onnx").stat().st_size > 0
