"""Model names reach nothing outside the repositories; directory stamps see file changes."""

import os
from pathlib import Path

import pytest

from server.contract.errors import InvalidInputError
from server.core.repository import check_name, directory_stamp


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "a\\b", ".hidden", "x\0y"])
def test_names_that_could_escape_are_refused(name: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid model name"):
        check_name(name)


def test_plain_names_pass() -> None:
    check_name("resnet18_v2-final")


def test_stamp_changes_with_any_file_below_the_model(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    model = tmp_path / "1" / "model.onnx"
    model.write_bytes(b"abc")
    first = directory_stamp(tmp_path)
    assert directory_stamp(tmp_path) == first
    model.write_bytes(b"abcd")
    assert directory_stamp(tmp_path) != first
    grown = directory_stamp(tmp_path)
    os.utime(model, ns=(1, 1))
    assert directory_stamp(tmp_path) != grown


def test_stamp_changes_when_an_empty_directory_goes(tmp_path: Path) -> None:
    (tmp_path / "2").mkdir()
    with_dir = directory_stamp(tmp_path)
    (tmp_path / "2").rmdir()
    assert directory_stamp(tmp_path) != with_dir
