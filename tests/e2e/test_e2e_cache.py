"""The response cache over both protocols: hits, misses, request ids that do not matter, one byte
that does, shared-memory inputs, the LRU bounded in bytes, a cached ensemble, statistics and
metrics; and a real redis-server that two servers share, killed and brought back mid-test, and
one that hangs (stopped) under load."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from e2e_support import (
    SIMPLE_BYTES,
    ConvoyServer,
    StartServer,
    ensemble_config,
    metric,
    shm_inputs,
    swapped_simple,
)
from onnx import TensorProto

from scripts import models
from scripts.gen_models import write_accumulate

CACHE = "response_cache { enable: true }\n"
CACHED = "cached"  # `simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1), cached
ENSEMBLE = "cached_ensemble"  # OUT = IN + IN through `cached`, cached at the top level too
# A `cached` entry of batch 1: a 32-byte key and two [1, 16] FP32 outputs.
ENTRY_BYTES = 32 + 2 * SIMPLE_BYTES
LOCAL_SIZE = 3 * ENTRY_BYTES + 32  # three such entries, not four


def _repository(repo: Path) -> Path:
    config = (
        f'name: "{CACHED}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]\n' + CACHE
    )
    models.write_model(repo, CACHED, models.simple(TensorProto.FLOAT), config)
    ensemble = ensemble_config(ENSEMBLE, "TYPE_FP32", 16, [("IN", "OUT", CACHED)])
    (repo / ENSEMBLE / "1").mkdir(parents=True)
    models.write_model(repo, ENSEMBLE, None, ensemble + CACHE)
    sequence = write_accumulate(repo)  # a sequence model asking for the cache: never cached
    config_path = sequence / "config.pbtxt"
    config_path.write_text(config_path.read_text() + CACHE)
    return repo


@pytest.fixture(scope="module")
def local(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ConvoyServer]:
    """A server whose local cache holds three `cached` entries."""
    repo = _repository(tmp_path_factory.mktemp("cache_models"))
    log = tmp_path_factory.mktemp("cache_log") / "server.log"
    flags = ("--cache-config", f"local,size={LOCAL_SIZE}")
    server = ConvoyServer(repo, log, *flags).start()
    try:
        yield server
        assert server.stop() == 0, server.log()
    finally:
        server.kill()


def _pair(seed: int, batch: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, 16)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(
        np.float32
    )


def _inputs(client: Any, a: np.ndarray, b: np.ndarray) -> list[Any]:
    """`cached`'s inputs; `client` is tritonclient.grpc or tritonclient.http."""
    tensors = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = client.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def _infer(url: str, a: np.ndarray, b: np.ndarray, request_id: str = "") -> None:
    """One gRPC request to `cached`; its outputs must be right, hit or miss."""
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        result = client.infer(CACHED, _inputs(grpcclient, a, b), request_id=request_id)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def _stats(url: str, model: str = CACHED) -> dict[str, int]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        stats = client.get_inference_statistics(model).model_stats[0]
    infer = stats.inference_stats
    return {
        "hits": infer.cache_hit.count,
        "misses": infer.cache_miss.count,
        "success": infer.success.count,
        "compute": infer.compute_infer.count,
        "executions": stats.execution_count,
        "inferences": stats.inference_count,
        "hit_ns": infer.cache_hit.ns,
        "miss_ns": infer.cache_miss.ns,
    }


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before if not k.endswith("_ns")}


def _counts(url: str) -> dict[str, int]:
    return _delta(dict.fromkeys(_stats(url), 0), _stats(url))


def _counted(hits: int, misses: int, executions: int) -> dict[str, int]:
    requests = hits + misses
    return {
        "hits": hits,
        "misses": misses,
        "success": requests,
        "compute": misses,
        "executions": executions,
        "inferences": executions,
    }


def test_equal_requests_hit_whatever_their_id_or_protocol(local: ConvoyServer) -> None:
    a, b = _pair(1)
    before = _stats(local.url)
    _infer(local.url, a, b, request_id="first")
    _infer(local.url, a, b, request_id="second")
    with contextlib.closing(httpclient.InferenceServerClient(f"127.0.0.1:{local.http_port}")) as c:
        result = c.infer(CACHED, _inputs(httpclient, a, b), request_id="third")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        http_stats = c.get_inference_statistics(CACHED)["model_stats"][0]["inference_stats"]
    after = _stats(local.url)
    assert _delta(before, after) == _counted(hits=2, misses=1, executions=1)
    assert after["hit_ns"] > before["hit_ns"] and after["miss_ns"] > before["miss_ns"]
    assert int(http_stats["cache_hit"]["count"]) == after["hits"]
    assert int(http_stats["cache_miss"]["count"]) == after["misses"]


def test_one_byte_different_misses(local: ConvoyServer) -> None:
    a, b = _pair(2)
    changed = a.copy()
    changed.view(np.uint8)[0, 7] ^= 0x01
    before = _stats(local.url)
    _infer(local.url, a, b)
    _infer(local.url, changed, b)
    _infer(local.url, changed, b)
    assert _delta(before, _stats(local.url)) == _counted(hits=1, misses=2, executions=2)


def test_least_recently_used_entries_go_first_and_a_too_large_one_is_not_stored(
    local: ConvoyServer,
) -> None:
    first, second, third, fourth = (_pair(seed) for seed in (10, 11, 12, 13))
    before = _stats(local.url)
    for a, b in (first, second, third):  # the cache now holds these three
        _infer(local.url, a, b)
    _infer(local.url, *first)  # a hit: `first` is the most recently used now
    _infer(local.url, *fourth)  # evicts `second`, the least recently used
    _infer(local.url, *first)
    _infer(local.url, *third)
    _infer(local.url, *second)  # evicted: runs again
    assert _delta(before, _stats(local.url)) == _counted(hits=3, misses=5, executions=5)
    entries = metric(local.metrics(), "nv_cache_num_entries")
    large = _pair(14, batch=8)  # two [8, 16] outputs: larger than the whole cache
    before = _stats(local.url)
    _infer(local.url, *large)
    _infer(local.url, *large)
    after = _stats(local.url)
    assert _delta(before, after) == {**_counted(hits=0, misses=2, executions=2), "inferences": 16}
    text = local.metrics()
    assert metric(text, "nv_cache_num_entries") == entries == 3
    assert metric(text, "nv_cache_num_evictions") >= 2


def test_shared_memory_inputs_are_read_from_their_region_for_the_key(local: ConvoyServer) -> None:
    tag = uuid.uuid4().hex[:8]
    region = shm.create_shared_memory_region(f"in_{tag}", f"/convoy_cache_{tag}", 2 * SIMPLE_BYTES)
    try:
        with contextlib.closing(grpcclient.InferenceServerClient(local.url)) as client:
            client.register_system_shared_memory(
                f"in_{tag}", f"/convoy_cache_{tag}", 2 * SIMPLE_BYTES
            )
            a, b = _pair(20)
            shm.set_shared_memory_region(region, [a, b])
            before = _stats(local.url)
            for _ in range(2):
                result = client.infer(CACHED, shm_inputs(grpcclient, f"in_{tag}"))
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            _infer(local.url, a, b)  # the same tensors sent inline: the same entry
            shm.set_shared_memory_region(region, [b, a])
            result = client.infer(CACHED, shm_inputs(grpcclient, f"in_{tag}"))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), b - a)
            client.unregister_system_shared_memory(f"in_{tag}")
        assert _delta(before, _stats(local.url)) == _counted(hits=2, misses=2, executions=2)
    finally:
        shm.destroy_shared_memory_region(region)


def test_an_ensemble_is_cached_at_the_top_and_its_steps_on_their_own(local: ConvoyServer) -> None:
    x = _pair(30)[0]
    tensor = grpcclient.InferInput("IN", [1, 16], "FP32")
    tensor.set_data_from_numpy(x)
    before = {model: _stats(local.url, model) for model in (ENSEMBLE, CACHED)}
    with contextlib.closing(grpcclient.InferenceServerClient(local.url)) as client:
        for _ in range(3):
            np.testing.assert_array_equal(client.infer(ENSEMBLE, [tensor]).as_numpy("OUT"), x + x)
    after = {model: _stats(local.url, model) for model in (ENSEMBLE, CACHED)}
    ensemble = _delta(before[ENSEMBLE], after[ENSEMBLE])
    assert (ensemble["hits"], ensemble["misses"], ensemble["success"]) == (2, 1, 3)
    # The step ran once, for the miss (a miss of its own); the hits never reached it.
    assert _delta(before[CACHED], after[CACHED]) == _counted(hits=0, misses=1, executions=1)


def test_a_reload_with_other_files_never_answers_from_the_old_entries(
    start_server: StartServer, tmp_path: Path
) -> None:
    """`cached` reloaded with a model that subtracts: neither it nor the ensemble above it
    answers from what the adding model stored; loaded back, the adding model's entries (the
    same files, the same keys, as on a replica) answer again."""
    repo = _repository(tmp_path / "models")
    flags = ("--model-control-mode", "explicit", "--load-model", "*")
    server = start_server(repo, *flags, "--cache-config", "local,size=1000000")
    a, b = _pair(50)
    tensor = grpcclient.InferInput("IN", [1, 16], "FP32")
    tensor.set_data_from_numpy(a)
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:

        def both() -> tuple[np.ndarray, np.ndarray]:
            result = client.infer(CACHED, _inputs(grpcclient, a, b)).as_numpy("OUTPUT0")
            return result, client.infer(ENSEMBLE, [tensor]).as_numpy("OUT")

        adding, twice = both()
        np.testing.assert_array_equal(adding, a + b)
        np.testing.assert_array_equal(twice, a + a)
        config = client.get_model_config(CACHED, as_json=True)["config"]
        files = {"file:1/model.onnx": swapped_simple().SerializeToString()}
        client.load_model(CACHED, config=json.dumps(config), files=files)
        subtracting, nothing = both()
        np.testing.assert_array_equal(subtracting, a - b)
        np.testing.assert_array_equal(nothing, np.zeros_like(a))
        client.load_model(CACHED)  # its own files again
        before = _stats(server.url)
        adding, twice = both()
    np.testing.assert_array_equal(adding, a + b)
    np.testing.assert_array_equal(twice, a + a)
    assert _delta(before, _stats(server.url))["hits"] == 1


def test_metrics_and_the_models_that_are_not_cached(local: ConvoyServer) -> None:
    _infer(local.url, *_pair(40))
    _infer(local.url, *_pair(40))
    stats = _stats(local.url)
    text = local.metrics()
    labels = {"model": CACHED, "version": "1"}
    assert metric(text, "nv_cache_num_hits_per_model", **labels) == stats["hits"]
    assert metric(text, "nv_cache_num_misses_per_model", **labels) == stats["misses"]
    assert metric(text, "nv_cache_hit_duration_per_model", **labels) == stats["hit_ns"] // 1000
    assert metric(text, "nv_cache_miss_duration_per_model", **labels) == stats["miss_ns"] // 1000
    assert metric(text, "nv_inference_exec_count", **labels) == stats["executions"]
    hits, misses = metric(text, "nv_cache_num_hits"), metric(text, "nv_cache_num_misses")
    assert hits >= stats["hits"]
    assert metric(text, "nv_cache_num_lookups") == hits + misses
    assert 0 < metric(text, "nv_cache_util") <= 1
    # The sequence model asked for the cache and was told no at load; it has no cache samples.
    no_cache = {"model": "accumulate", "version": "1"}
    assert np.isnan(metric(text, "nv_cache_num_hits_per_model", **no_cache))
    assert "sequence models are never cached" in local.log()


# --- Redis ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of its own on 127.0.0.1 (no persistence), stopped and started at will."""

    def __init__(self, binary: str, port: int, log_path: Path) -> None:
        self.binary, self.port, self.log_path = binary, port, log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn,
            ):
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.05)
        pytest.fail(f"redis-server did not answer; log:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def hang(self, hung: bool) -> None:
        """Stop the server (it keeps its connections and answers nothing) or let it go on."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP if hung else signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (.ci/run installs Debian's package)")
    server = RedisServer(binary, _free_port(), tmp_path / "redis.log").start()
    try:
        yield server
    finally:
        server.stop()


def _eventually(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_two_servers_share_a_redis_cache_and_survive_its_outage(
    start_server: StartServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    repo = _repository(tmp_path / "models")
    port = redis_server.port
    flags = ("--cache-config", "redis,host=127.0.0.1", "--cache-config", f"redis,port={port}")
    first, second = start_server(repo, *flags), start_server(repo, *flags)
    a, b = _pair(50)
    _infer(first.url, a, b)
    _infer(second.url, a, b)  # answered from the entry the first server stored
    assert _counts(first.url) == _counted(hits=0, misses=1, executions=1)
    assert _counts(second.url) == _counted(hits=1, misses=0, executions=0)

    redis_server.stop()  # every request is still answered, as a miss
    c, d = _pair(51)
    for _ in range(3):
        _infer(second.url, c, d)
        _infer(second.url, a, b)
    stats = _stats(second.url)
    assert (stats["hits"], stats["misses"], stats["executions"]) == (1, 6, 6)
    assert second.log().count("does not answer") == 1  # once for the outage

    redis_server.start()  # empty again; the server reconnects within its retry interval
    _eventually(lambda: (_infer(second.url, c, d), _stats(second.url)["hits"] > 1)[1])
    assert "answers again" in second.log()
    # The first server's connection died with Redis too: it may miss once, then it finds the
    # entry the second server stored.
    _eventually(lambda: (_infer(first.url, c, d), _stats(first.url)["hits"] == 1)[1])
    text = first.metrics()
    assert metric(text, "nv_cache_num_hits") == 1
    assert np.isnan(metric(text, "nv_cache_util"))  # Redis keeps its own size


def test_a_hung_redis_holds_only_the_requests_that_were_waiting_on_it(
    start_server: StartServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    """A Redis that stops answering (stopped here; a partition looks the same) costs the
    requests waiting on it when it stopped their socket timeout (250 ms here), and no other:
    the requests after them run uncached while one probe of the server's own asks Redis again,
    where before each retry interval sent every request that came to Redis again."""
    flags = ("--cache-config", "redis,host=127.0.0.1", "--cache-config")
    flags += (f"redis,port={redis_server.port}", "--cache-config", "redis,socket_timeout=250")
    server = start_server(_repository(tmp_path / "models"), *flags)
    clients, hung_s = 4, 2.5
    slow: list[float] = []
    stop = threading.Event()

    def send(seed: int) -> None:
        with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as client:
            for index in range(10_000):
                if stop.is_set():
                    return
                a, b = _pair(seed * 10_000 + index % 20)
                started = time.monotonic()
                result = client.infer(CACHED, _inputs(grpcclient, a, b))
                elapsed = time.monotonic() - started
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
                if elapsed > 0.24:  # a wait on Redis, not the model's time
                    slow.append(elapsed)

    senders = [threading.Thread(target=send, args=(seed,)) for seed in range(clients)]
    for sender in senders:
        sender.start()
    try:
        time.sleep(0.5)
        redis_server.hang(True)
        time.sleep(hung_s)
        redis_server.hang(False)
        _eventually(lambda: "answers again" in server.log(), timeout_s=10)
        hits = _stats(server.url)["hits"]
        _eventually(lambda: _stats(server.url)["hits"] > hits)  # the cache serves again
    finally:
        stop.set()
        for sender in senders:
            sender.join()
    # Those in flight when it stopped (the rule before held 8: each retry interval's four).
    assert len(slow) <= clients, slow
    assert server.log().count("does not answer") == 1
