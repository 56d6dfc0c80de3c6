"""Version directories and Triton's version policies."""

from pathlib import Path

import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError, InvalidInputError
from server.core.repository import list_versions, parse_version, select_versions


def test_lists_numeric_directories_only(tmp_path: Path) -> None:
    for name in ("1", "3", "10", "02", "latest", "0"):
        (tmp_path / name).mkdir()
    (tmp_path / "5").write_text("a file, not a version directory")
    assert list_versions(tmp_path) == [1, 3, 10]


def _policy(text: str) -> mc.ModelVersionPolicy:
    from google.protobuf import text_format

    return text_format.Parse(text, mc.ModelVersionPolicy())


def test_default_policy_is_latest_one() -> None:
    assert select_versions("m", mc.ModelVersionPolicy(), [1, 2, 3]) == [3]


def test_latest_n() -> None:
    assert select_versions("m", _policy("latest { num_versions: 2 }"), [3, 1, 2]) == [2, 3]


def test_all() -> None:
    assert select_versions("m", _policy("all { }"), [2, 1]) == [1, 2]


def test_specific_keeps_missing_versions_for_reporting() -> None:
    assert select_versions("m", _policy("specific { versions: [3, 1] }"), [1, 2]) == [1, 3]


def test_latest_zero_is_an_error() -> None:
    with pytest.raises(ConfigError, match="num_versions"):
        select_versions("m", _policy("latest { num_versions: 0 }"), [1])


def test_version_directories_and_request_versions_take_ascii_digits_only(tmp_path: Path) -> None:
    arabic_one = "\u0661"  # int() reads it as 1
    for name in ("2", arabic_one, "\uff13"):  # and a fullwidth 3
        (tmp_path / name).mkdir()
    assert list_versions(tmp_path) == [2]
    assert parse_version("12") == 12
    for text in (arabic_one, " 3", "+3", "1_0", "", "3 "):
        with pytest.raises(InvalidInputError, match="failed to get model version"):
            parse_version(text)
    with pytest.raises(InvalidInputError, match="invalid model version specified '-2'"):
        parse_version("-2")
