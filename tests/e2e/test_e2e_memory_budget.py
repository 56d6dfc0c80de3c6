"""The memory budget end to end: refusals that name the numbers, LRU eviction of idle models,
footprints in ModelStatistics, and evicted models loaded again on demand.

Three copies of `simple` with one instance each have the same footprint F; a budget of 2.5 F
holds two of them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, ensemble_config, infer_input, simple_inputs
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models
from server.core.repository import footprint_bytes, parse_config

NAMES = ("first", "second", "third")


def _config(name: str) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, int]:
    """The repository and the footprint each of its models has."""
    repo = tmp_path / "repo"
    for name in NAMES:
        models.write_model(repo, name, models.simple(TensorProto.FLOAT), _config(name))
    size = (repo / "first" / "1" / "model.onnx").stat().st_size
    return repo, footprint_bytes(parse_config(_config("first"), "inline"), size, 1)


@contextlib.contextmanager
def _client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as opened:
        yield opened


def _infer(client: grpcclient.InferenceServerClient, name: str) -> None:
    inputs, a, b = simple_inputs(1)
    result = client.infer(name, inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)


def _reasons(client: grpcclient.InferenceServerClient) -> dict[str, tuple[str, str]]:
    return {m.name: (m.state, m.reason) for m in client.get_model_repository_index().models}


def _budget_flags(footprint: int, *extra: str) -> tuple[str, ...]:
    return ("--model-control-mode", "explicit", "--memory-budget", str(footprint * 5 // 2), *extra)


def test_a_load_past_the_budget_is_refused_with_the_numbers(
    start_server: StartServer, repository: tuple[Path, int]
) -> None:
    repo, footprint = repository
    server = start_server(repo, *_budget_flags(footprint))
    with _client(server.url) as client:
        client.load_model("first")
        client.load_model("second")
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("third")
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        message = refused.value.message()
        assert f"it needs {footprint} bytes" in message
        assert f"of the {footprint * 5 // 2}-byte memory budget are free" in message
        assert not client.is_model_ready("third")
        _infer(client, "first")  # the loaded ones are untouched
        _infer(client, "second")
        stats = client.get_inference_statistics("first").model_stats[0]
        assert [(m.type, m.byte_size) for m in stats.memory_usage] == [("CPU", footprint)]


def test_lru_eviction_unloads_the_least_recently_used_idle_model(
    start_server: StartServer, repository: tuple[Path, int]
) -> None:
    repo, footprint = repository
    server = start_server(repo, *_budget_flags(footprint, "--model-eviction", "lru"))
    with _client(server.url) as client:
        client.load_model("first")
        time.sleep(0.01)
        client.load_model("second")
        time.sleep(0.01)
        _infer(client, "first")  # now "second" is the least recently used
        client.load_model("third")
        reasons = _reasons(client)
        assert reasons["second"][0] == "UNAVAILABLE"
        assert "evicted (least recently used) to make room for 'third'" in reasons["second"][1]
        assert client.is_model_ready("first") and client.is_model_ready("third")
        with pytest.raises(InferenceServerException) as gone:
            _infer(client, "second")
        assert gone.value.status() == "StatusCode.UNAVAILABLE"
    assert "model 'second' evicted" in server.log()


def test_lazy_load_brings_an_evicted_model_back_on_request(
    start_server: StartServer, repository: tuple[Path, int]
) -> None:
    repo, footprint = repository
    flags = _budget_flags(footprint, "--model-eviction", "lru", "--lazy-load")
    server = start_server(repo, *flags)
    with _client(server.url) as client:
        client.load_model("first")
        time.sleep(0.01)
        client.load_model("second")
        time.sleep(0.01)
        _infer(client, "second")
        client.load_model("third")  # evicts "first"
        assert not client.is_model_ready("first")
        _infer(client, "first")  # loads it again, evicting the least recently used: "second"
        assert client.is_model_ready("first")
        assert "evicted" in _reasons(client)["second"][1]


def test_a_loaded_ensembles_composing_model_is_never_evicted(
    start_server: StartServer, repository: tuple[Path, int]
) -> None:
    repo, footprint = repository
    (repo / "pair" / "1").mkdir(parents=True)
    config = ensemble_config("pair", "TYPE_FP32", 16, [("IN", "OUT", "first")])
    (repo / "pair" / "config.pbtxt").write_text(config, encoding="utf-8")
    server = start_server(repo, *_budget_flags(footprint, "--model-eviction", "lru"))
    with _client(server.url) as client:
        client.load_model("pair")  # loads "first", which "pair" uses
        time.sleep(0.01)
        client.load_model("second")
        time.sleep(0.01)
        _infer(client, "second")  # "first" is the least recently used, but in use by "pair"
        client.load_model("third")
        assert "evicted (least recently used)" in _reasons(client)["second"][1]
        assert client.is_model_ready("first") and client.is_model_ready("pair")
        x = np.ones((1, 16), np.float32)
        result = client.infer("pair", [infer_input("IN", x, "FP32")])
        np.testing.assert_allclose(result.as_numpy("OUT"), 2 * x)
