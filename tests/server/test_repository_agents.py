"""The checksum repository agent: a model's files against its config's digests, before it loads
(Triton's `checksum` agent, MD5 and the other hashlib digests); other agents are refused."""

import hashlib
from pathlib import Path

import pytest

from server.contract.errors import ConfigError
from server.core.repository import parse_config, run_agents


def _config(parameters: str, name: str = "checksum") -> str:
    return (
        f'name: "m"\nmodel_repository_agents {{ agents [ {{ name: "{name}" {parameters} }} ] }}\n'
    )


def _parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: "{value}" }}'


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"weights" * 1000)
    return tmp_path


def test_files_that_match_their_digests_pass(model_dir: Path) -> None:
    data = (model_dir / "1" / "model.onnx").read_bytes()
    md5, sha256 = hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()
    parameters = (
        _parameter("MD5:1/model.onnx", md5) + " " + _parameter("SHA256:1/model.onnx", sha256)
    )
    run_agents(parse_config(_config(parameters), "inline"), model_dir)
    run_agents(parse_config('name: "m"', "inline"), model_dir)  # no agents: nothing to check


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_config(_parameter("MD5:1/model.onnx", "0" * 32)), "the MD5 checksum of '1/model.onnx'"),
        (_config(_parameter("MD5:1/missing.onnx", "0" * 32)), "cannot read '1/missing.onnx'"),
        (_config(_parameter("MD5:../outside", "0" * 32)), "names a file outside the model"),
        (_config(_parameter("CRC32:1/model.onnx", "0")), "must be ALGORITHM:path/in/model"),
        (_config("", name="decrypt"), "repository agent 'decrypt' is not available"),
    ],
)
def test_a_mismatch_or_an_agent_convoy_lacks_fails_the_load(
    model_dir: Path, config: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_agents(parse_config(config, "inline"), model_dir)
