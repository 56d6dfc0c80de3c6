"""Stateful models through tritonclient: interleaved sequences from concurrent clients, both
protocols and streaming, Triton's sequence errors, idle release, the oldest strategy's batching,
and unload, reload and instance-count changes ending or keeping sequences as Triton does."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_support import ConvoyServer, StartServer, model_workers, wait_for
from tritonclient.utils import InferenceServerException

from scripts import gen_models

ONNX = "accumulate"  # implicit state, max_batch_size 8
PYTHON = "accumulate_python"  # controls with CORRID, kept by model.py, not batching


def _input(module: Any, model: str, value: int) -> Any:
    shape = [1] if model == PYTHON else [1, 1]  # the ONNX ones batch
    tensor = module.InferInput("INPUT", shape, "INT32")
    tensor.set_data_from_numpy(np.full(shape, value, np.int32))
    return tensor


def _total(result: Any) -> int:
    return int(result.as_numpy("OUTPUT").reshape(-1)[0])


@contextlib.contextmanager
def _clients(server: ConvoyServer) -> Iterator[tuple[Any, Any]]:
    grpc_client = grpcclient.InferenceServerClient(server.url)
    http_client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        yield grpc_client, http_client
    finally:
        grpc_client.close()
        http_client.close()


def _send(
    client: Any, model: str, sequence: int | str, value: int, start: bool = False, end: bool = False
) -> int:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    result = client.infer(
        model,
        [_input(module, model, value)],
        sequence_id=sequence,
        sequence_start=start,
        sequence_end=end,
    )
    return _total(result)


def _run_sequence(
    client: Any, model: str, sequence: int | str, values: list[int], pause: Callable[[], None]
) -> list[int]:
    totals = []
    for index, value in enumerate(values):
        totals.append(_send(client, model, sequence, value, index == 0, index == len(values) - 1))
        pause()
    return totals


@pytest.mark.parametrize("model", [ONNX, PYTHON])
def test_concurrent_clients_keep_their_own_totals(convoy: ConvoyServer, model: str) -> None:
    """Eight clients (half gRPC, half HTTP), interleaved: each sees its own running totals."""
    barrier = threading.Barrier(8)
    failures: list[str] = []

    def client_run(index: int) -> None:
        # String ids where the model takes no CORRID control (a uint64 one needs numbers).
        named = model == ONNX and index % 3 == 0
        sequence: int | str = f"client-{index}" if named else 1000 + index
        values = [(index + 1) * 10 + step for step in range(8)]
        with _clients(convoy) as (grpc_client, http_client):
            client = grpc_client if index % 2 else http_client
            barrier.wait()
            try:
                totals = _run_sequence(client, model, sequence, values, lambda: time.sleep(0.001))
            except InferenceServerException as exc:
                failures.append(f"sequence {sequence}: {exc}")
                return
        if totals != list(np.cumsum(values)):
            failures.append(f"sequence {sequence}: {totals} for {values}")

    threads = [threading.Thread(target=client_run, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures


def test_sequences_over_a_stream(convoy: ConvoyServer) -> None:
    """async_stream_infer carries the sequence flags; two sequences interleave on one stream."""
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(convoy.url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        sent = {"s1": [1, 2, 3, 4], "s2": [100, 200, 300, 400]}
        for step in range(4):
            for name, values in sent.items():
                sequence = 7001 if name == "s1" else 7002
                client.async_stream_infer(
                    ONNX,
                    [_input(grpcclient, ONNX, values[step])],
                    request_id=f"{name}-{step}",
                    sequence_id=sequence,
                    sequence_start=step == 0,
                    sequence_end=step == 3,
                )
        got: dict[str, int] = {}
        for _ in range(8):
            answer = answers.get(timeout=30)
            assert not isinstance(answer, InferenceServerException), answer
            got[answer.get_response().id] = _total(answer)
    finally:
        client.stop_stream()
        client.close()
    for name, values in sent.items():
        assert [got[f"{name}-{step}"] for step in range(4)] == list(np.cumsum(values))


def test_async_infer_carries_the_sequence(convoy: ConvoyServer) -> None:
    """async_infer on both clients: one request of a sequence at a time, each total checked."""
    with _clients(convoy) as (grpc_client, http_client):
        for client, module, sequence in (
            (grpc_client, grpcclient, 6001),
            (http_client, httpclient, 6002),
        ):
            totals = []
            for step, value in enumerate([2, 3, 4]):
                flags = {"sequence_start": step == 0, "sequence_end": step == 2}
                inputs = [_input(module, ONNX, value)]
                if module is grpcclient:
                    done: queue.Queue[Any] = queue.Queue()
                    client.async_infer(
                        ONNX,
                        inputs,
                        lambda result, error, done=done: done.put(error or result),
                        sequence_id=sequence,
                        **flags,
                    )
                    answer = done.get(timeout=30)
                    assert not isinstance(answer, InferenceServerException), answer
                else:
                    answer = client.async_infer(ONNX, inputs, sequence_id=sequence, **flags)
                    answer = answer.get_result()
                totals.append(_total(answer))
            assert totals == [2, 5, 9]


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sequence_errors_have_tritons_status_and_wording(
    convoy: ConvoyServer, protocol: str
) -> None:
    with _clients(convoy) as (grpc_client, http_client):
        client = grpc_client if protocol == "grpc" else http_client
        bad = "StatusCode.INVALID_ARGUMENT" if protocol == "grpc" else "400"

        def refused(sequence: int | str, start: bool = False) -> str:
            with pytest.raises(InferenceServerException) as caught:
                _send(client, ONNX, sequence, 1, start=start)
            assert str(caught.value.status()) == bad
            return caught.value.message()

        assert refused(0) == (
            f"inference request to model '{ONNX}' must specify a non-zero or non-empty "
            "correlation ID"
        )
        never_started = refused(4242)
        assert never_started == (
            f"inference request for sequence 4242 to model '{ONNX}' must specify the START "
            "flag on the first request of the sequence"
        )
        sequence = 4300 if protocol == "grpc" else "ended-http"
        assert _send(client, ONNX, sequence, 5, start=True, end=True) == 5
        assert "must specify the START flag" in refused(sequence)  # ended: unknown again


def test_statistics_count_sequence_requests(convoy: ConvoyServer) -> None:
    with _clients(convoy) as (grpc_client, _):
        before = grpc_client.get_inference_statistics(PYTHON).model_stats[0]
        _run_sequence(grpc_client, PYTHON, 5151, [1, 2, 3], lambda: None)
        after = grpc_client.get_inference_statistics(PYTHON).model_stats[0]
    assert after.inference_count - before.inference_count == 3
    assert after.inference_stats.success.count - before.inference_stats.success.count == 3


ACCUMULATE_CONFIG = (
    'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
    'input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]\n'
    'output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]\n'
    "instance_group [ {{ kind: KIND_CPU count: {count} }} ]\n"
    "sequence_batching {{\n  max_sequence_idle_microseconds: {idle_us}\n  {strategy}\n"
    '  control_input [\n    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START '
    "int32_false_true: [ 0, 1 ] }} ] }},\n"
    '    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY '
    "int32_false_true: [ 0, 1 ] }} ] }}\n  ]\n"
    '  state [ {{ input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 '
    "dims: [ 1 ] }} ]\n}}\n"
)


def _write_accumulator(
    repo: Path, name: str, strategy: str = "", idle_us: int = 5_000_000, count: int = 1
) -> None:
    gen_models.write_accumulate(repo)
    target = repo / name
    if target != repo / ONNX:
        shutil.rmtree(target, ignore_errors=True)
        (repo / ONNX).rename(target)
    config = ACCUMULATE_CONFIG.format(name=name, strategy=strategy, idle_us=idle_us, count=count)
    (target / "config.pbtxt").write_text(config)


@pytest.fixture
def stateful_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "stateful"
    repo.mkdir()
    _write_accumulator(repo, "idle", idle_us=300_000)
    _write_accumulator(
        repo,
        "oldest",
        "oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 50000 "
        "preferred_batch_size: [ 4 ] }",
    )
    _write_accumulator(repo, "direct", count=2)
    return repo


def test_idle_sequence_is_released(start_server: StartServer, stateful_repository: Path) -> None:
    server = start_server(stateful_repository)
    with _clients(server) as (client, _):
        assert _send(client, "idle", 31, 2, start=True) == 2
        assert _send(client, "idle", 31, 2) == 4
        time.sleep(0.8)  # idle for more than its 300 ms (any request would refresh it)
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            _send(client, "idle", 31, 2)
        assert _send(client, "idle", 31, 7, start=True) == 7  # the id starts afresh


def test_oldest_strategy_batches_sequences(
    start_server: StartServer, stateful_repository: Path
) -> None:
    """Four sequences step together: the oldest strategy runs them in batches of four."""
    server = start_server(stateful_repository)
    results: dict[int, list[int]] = {}

    def client_run(sequence: int) -> None:
        with _clients(server) as (client, _):
            results[sequence] = _run_sequence(
                client, "oldest", sequence, [sequence] * 5, lambda: None
            )

    threads = [threading.Thread(target=client_run, args=(s,)) for s in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == {s: [s * k for k in range(1, 6)] for s in (1, 2, 3, 4)}
    with _clients(server) as (client, _):
        stats = client.get_inference_statistics("oldest").model_stats[0]
    assert stats.inference_count == 20
    assert stats.execution_count < 20  # sequences ran together
    assert any(b.batch_size == 4 for b in stats.batch_stats)


def test_direct_strategy_spreads_over_instances_and_survives_a_count_change(
    start_server: StartServer, stateful_repository: Path
) -> None:
    server = start_server(
        stateful_repository, "--model-control-mode", "explicit", "--load-model", "*"
    )
    with _clients(server) as (client, _):
        for sequence in (41, 42, 43):
            assert _send(client, "direct", sequence, sequence, start=True) == sequence
        # One instance fewer: the version stays and its sequences keep their totals.
        config = (stateful_repository / "direct" / "config.pbtxt").read_text()
        client.load_model("direct", config=None)
        (stateful_repository / "direct" / "config.pbtxt").write_text(
            config.replace("count: 2", "count: 1")
        )
        resize = threading.Thread(target=client.load_model, args=("direct",))
        resize.start()
        for sequence in (41, 42, 43):
            assert _send(client, "direct", sequence, 1, end=True) == sequence + 1
        resize.join(30)
        assert not resize.is_alive()
        assert _send(client, "direct", 44, 9, start=True, end=True) == 9
        config_now = client.get_model_config("direct").config
        assert sum(group.count for group in config_now.instance_group) == 1


def test_unload_and_reload_end_sequences(
    start_server: StartServer, stateful_repository: Path
) -> None:
    server = start_server(
        stateful_repository, "--model-control-mode", "explicit", "--load-model", "*"
    )
    with _clients(server) as (client, _):
        assert _send(client, "direct", 51, 1, start=True) == 1
        client.unload_model("direct")
        with pytest.raises(InferenceServerException):
            _send(client, "direct", 51, 1)
        client.load_model("direct")
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            _send(client, "direct", 51, 1)
        assert _send(client, "direct", 51, 3, start=True, end=True) == 3


def test_a_sequence_whose_python_worker_died_must_start_again(
    start_server: StartServer, tmp_path: Path
) -> None:
    """model.py keeps each sequence's total in its worker process: when the process dies, the
    sequences begun there fail clearly (never a total counted from nothing) until they start
    again; the server and its other sequences go on."""
    repo = tmp_path / "repo"
    gen_models.write_accumulate_python(repo)
    server = start_server(repo)
    assert server.process is not None
    with _clients(server) as (grpc_client, http_client):
        assert _send(grpc_client, PYTHON, 61, 5, start=True) == 5
        assert _send(http_client, PYTHON, 62, 7, start=True) == 7
        dead = model_workers(server.process.pid)
        for pid in dead:  # both instances: the sequences may sit on either
            os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: (
                len(set(model_workers(server.process.pid)) - set(dead)) == len(dead)
                and grpc_client.is_model_ready(PYTHON)
            ),
            "the workers' replacements",
        )
        for client, sequence, status in (
            (grpc_client, 61, "StatusCode.INTERNAL"),
            (http_client, 62, "500"),
        ):
            with pytest.raises(InferenceServerException) as caught:
                _send(client, PYTHON, sequence, 1)
            assert str(caught.value.status()) == status
            assert f"sequence {sequence} lost its state" in caught.value.message()
            assert "start the sequence again" in caught.value.message()
        with pytest.raises(InferenceServerException, match="lost its state"):
            _send(grpc_client, PYTHON, 61, 1, end=True)  # its END ends it
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            _send(grpc_client, PYTHON, 61, 1)
        assert _send(grpc_client, PYTHON, 61, 3, start=True) == 3
        assert _send(grpc_client, PYTHON, 61, 4, end=True) == 7
        assert _send(http_client, PYTHON, 62, 10, start=True) == 10  # again, without an END
        assert _send(http_client, PYTHON, 62, 1, end=True) == 11
    assert "Traceback" not in server.log()
