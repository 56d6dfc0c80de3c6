"""Class labels: each output's label_filename read from the model directory, one per line."""

from pathlib import Path

import pytest

from server.contract.errors import ConfigError
from server.core.repository import parse_config, read_labels

CONFIG = parse_config(
    'name: "m" max_batch_size: 8 '
    'output [ { name: "probs" data_type: TYPE_FP32 dims: [3] label_filename: "labels.txt" },'
    ' { name: "plain" data_type: TYPE_FP32 dims: [3] } ]',
    "inline",
)


def test_labels_are_read_per_labelled_output_one_per_line(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\ndog\r\n\neel\n", encoding="utf-8")
    assert read_labels(CONFIG, tmp_path) == {"probs": ("cat", "dog", "", "eel")}


def test_a_missing_label_file_is_a_load_error_naming_output_and_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'labels.txt' of output 'probs'.*No such file"):
        read_labels(CONFIG, tmp_path)


@pytest.mark.parametrize("name", ["../labels.txt", "/etc/hostname"])
def test_a_label_file_outside_the_model_directory_is_refused(tmp_path: Path, name: str) -> None:
    config = parse_config(
        f'name: "m" output [ {{ name: "o" data_type: TYPE_FP32 dims: [1] '
        f'label_filename: "{name}" }} ]',
        "inline",
    )
    with pytest.raises(ConfigError, match="inside the model directory"):
        read_labels(config, tmp_path)
