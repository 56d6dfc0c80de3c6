"""scripts/python_preprocess_bench.py: its repositories (two instances, in the worker processes
and in process; Triton's over the stub's own site directory) and perf_analyzer's input data."""

import base64
import io
import json
import struct
from pathlib import Path

from PIL import Image

from scripts import python_preprocess_bench as bench
from server.core.repository import parse_config


def test_convoys_two_models_and_tritons_one_serve_the_same_model_py(tmp_path: Path) -> None:
    convoy = bench.build_repository(tmp_path / "convoy")
    triton = bench.build_repository(tmp_path / "triton", tmp_path / "site")
    for repo, name in [(convoy, bench.WORKERS), (convoy, bench.IN_PROCESS_MODEL)]:
        config = parse_config((repo / name / "config.pbtxt").read_text(), name)
        assert config.instance_group[0].count == 2
        placed = config.parameters.get("convoy_in_process")
        assert (placed is not None) == (name == bench.IN_PROCESS_MODEL)
    assert sorted(p.name for p in triton.iterdir()) == [bench.WORKERS]
    source = (triton / bench.WORKERS / "1" / "model.py").read_text()
    inserted = f"import sys\n\nsys.path[:0] = [{str(tmp_path / 'site')!r}]\n"
    assert inserted in source
    compile(source, "model.py", "exec")  # __future__ still comes first
    plain = (convoy / bench.WORKERS / "1" / "model.py").read_text()
    assert source.replace(inserted, "") == plain


def test_the_input_data_is_one_serialized_jpeg(tmp_path: Path) -> None:
    image = bench.jpeg()
    data = json.loads(bench.input_data(tmp_path / "input.json", image).read_text())
    element = base64.b64decode(data["data"][0]["IMAGE"]["b64"])
    (length,) = struct.unpack_from("<I", element)
    assert length == len(image) == len(element) - 4
    with Image.open(io.BytesIO(element[4:])) as picture:
        assert picture.format == "JPEG" and picture.size == (640, 480)
