"""Keep-alive's rules: a model's keep-alive (its parameter over the server's) and when an idle
model is due for unloading, with explicit clocks."""

import pytest

from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.repository import due, keep_alive_of, parse_config


def _config(keep_alive: str | None) -> mc.ModelConfig:
    parameter = (
        ""
        if keep_alive is None
        else f'parameters {{ key: "convoy_keep_alive_s" value {{ string_value: "{keep_alive}" }} }}'
    )
    return parse_config(f'name: "m" backend: "onnxruntime" {parameter}', "inline")


def test_a_models_keep_alive_overrides_the_servers() -> None:
    assert keep_alive_of(_config(None), 30.0) == 30.0
    assert keep_alive_of(_config("2.5"), 30.0) == 2.5
    assert keep_alive_of(_config("0"), 30.0) == 0.0


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "inf", ""])
def test_a_bad_keep_alive_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="convoy_keep_alive_s must be a number of seconds"):
        keep_alive_of(_config(bad), 0.0)


def test_a_model_is_due_once_idle_for_its_keep_alive() -> None:
    assert not due(last_used_ms=1_000, now_ms=2_999, keep_alive_s=2.0)
    assert due(last_used_ms=1_000, now_ms=3_000, keep_alive_s=2.0)
    assert not due(last_used_ms=0, now_ms=10**12, keep_alive_s=0.0)  # 0 keeps it loaded
