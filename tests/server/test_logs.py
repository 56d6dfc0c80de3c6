"""LogControl: Triton's log settings applied to Python's logging."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.contract.errors import InternalError, InvalidInputError
from server.contract.logs import LogControl, LogState


@pytest.fixture
def control() -> Iterator[LogControl]:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    made = LogControl(LogState())
    yield made
    root.handlers[:] = saved[1]
    root.setLevel(saved[0])


def test_levels_follow_the_settings(control: LogControl) -> None:
    assert logging.getLogger().level == logging.INFO
    control.update({"log_verbose_level": 2})
    assert logging.getLogger().level == logging.DEBUG
    control.update({"log_verbose_level": 0, "log_info": False})
    assert logging.getLogger().level == logging.WARNING
    assert control.settings()["log_info"] is False


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"log_colour": "red"}, InvalidInputError),
        ({"log_info": 1}, InvalidInputError),
        ({"log_format": "xml"}, InvalidInputError),
        ({"log_file": "/no/such/folder/server.log"}, InternalError),
    ],
)
def test_bad_changes_change_nothing(
    control: LogControl, changes: dict[str, object], error: type[Exception]
) -> None:
    before = control.settings()
    with pytest.raises(error):
        control.update(changes)  # type: ignore[arg-type]
    assert control.settings() == before


def test_log_file_takes_the_lines_and_stderr_gets_them_back(
    control: LogControl, tmp_path: Path
) -> None:
    path = tmp_path / "server.log"
    control.update({"log_file": str(path)})
    logging.getLogger("convoy").info("to the file")
    control.update({"log_file": ""})
    logging.getLogger("convoy").info("to stderr")
    assert "to the file" in path.read_text(encoding="utf-8")
    assert "to stderr" not in path.read_text(encoding="utf-8")
    assert control.settings()["log_file"] == ""
