"""ONNX Runtime's telemetry: off unless the environment already names a choice."""

import pytest

from server.contract.framework_telemetry import ORT_DISABLE_TELEMETRY, quiet_framework_telemetry


def test_an_environment_without_a_choice_turns_it_off() -> None:
    environ = {"HOME": "/home/user"}
    assert quiet_framework_telemetry(environ)
    assert environ == {"HOME": "/home/user", ORT_DISABLE_TELEMETRY: "1"}


@pytest.mark.parametrize("choice", ["0", "1", ""])
def test_a_choice_in_the_environment_is_kept(choice: str) -> None:
    environ = {ORT_DISABLE_TELEMETRY: choice}
    assert not quiet_framework_telemetry(environ)
    assert environ == {ORT_DISABLE_TELEMETRY: choice}
