"""Version directories and Triton's version policies."""

from pathlib import Path

import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import list_versions, select_versions


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
