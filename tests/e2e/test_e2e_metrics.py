"""Prometheus metrics after known traffic: exact counts, failure reasons, batching, histograms,
CPU gauges, and the flags that turn groups off."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from e2e_support import StartServer, infer_input
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from scripts import models

# Adds a [16] constant: any other last dimension fails inside ONNX Runtime (a BACKEND failure).
ADD16 = helper.make_model(
    helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])],
        "add16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
        [numpy_helper.from_array(np.ones(16, np.float32), "c")],
    ),
    opset_imports=[helper.make_opsetid("", models.OPSET)],
    ir_version=models.IR_VERSION,
)


def _config(name: str, batching: str) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [-1] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [16] }} ]
{batching}
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_model(repo, "plain", ADD16, _config("plain", ""))
    batched = "dynamic_batching { preferred_batch_size: [4] max_queue_delay_microseconds: 3000000 }"
    models.write_model(repo, "batched", ADD16, _config("batched", batched))
    # Triton's wait: every request waits out the delay (the adaptive delay would send the last
    # one at once, having learned that a wait here reaches one request).
    waiting = (
        "dynamic_batching { preferred_batch_size: [8] max_queue_delay_microseconds: 1000000 "
        "default_queue_policy { max_queue_size: 1 } }\n"
        'parameters { key: "convoy_adaptive_queue_delay" value: { string_value: "false" } }'
    )
    models.write_model(repo, "waiting", ADD16, _config("waiting", waiting))
    return repo


def _value(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = "^" + re.escape(f"{name}{{{wanted}}}" if wanted else name) + r" (\S+)$"
    found = re.findall(pattern, text, re.MULTILINE)
    assert len(found) == 1, f"{name} {labels}: {found}"
    return float(found[0])


def _x(width: int = 16, batch: int = 1) -> list[grpcclient.InferInput]:
    return [infer_input("x", np.zeros((batch, width), np.float32), "FP32")]


@contextlib.contextmanager
def _client(url: str) -> Iterator[grpcclient.InferenceServerClient]:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as opened:
        yield opened


def _in_threads(*calls: object) -> list[object]:
    results: list[object] = [None] * len(calls)

    def run(index: int, call: object) -> None:
        try:
            results[index] = call()  # type: ignore[operator]
        except InferenceServerException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # in order
    for thread in threads:
        thread.join()
    return results


def test_exact_counts_after_known_traffic(start_server: StartServer, repository: Path) -> None:
    server = start_server(repository)
    with _client(server.url) as client:
        for _ in range(3):
            client.infer("plain", _x())
        with pytest.raises(InferenceServerException):
            client.infer("plain", _x(width=5))  # fails inside ONNX Runtime
        # Four requests of batch 1 meet at the preferred size 4: one execution.
        _in_threads(*[lambda: client.infer("batched", _x())] * 4)
        # One waits for its delay; the second finds the queue full; the third gives up.
        waiting = _in_threads(
            lambda: client.infer("waiting", _x()),
            lambda: client.infer("waiting", _x()),
        )
        assert isinstance(waiting[1], InferenceServerException)
        assert "Exceeds maximum queue size" in waiting[1].message()
        with pytest.raises(InferenceServerException):
            client.infer("waiting", _x(), client_timeout=0.2)
    time.sleep(0.3)
    text = server.metrics()
    plain = {"model": "plain", "version": "1"}
    assert _value(text, "nv_inference_request_success", **plain) == 3
    assert _value(text, "nv_inference_request_failure", reason="BACKEND", **plain) == 1
    assert _value(text, "nv_inference_count", **plain) == 3
    assert _value(text, "nv_inference_exec_count", **plain) == 3
    batched = {"model": "batched", "version": "1"}
    assert _value(text, "nv_inference_count", **batched) == 4
    assert _value(text, "nv_inference_exec_count", **batched) == 1
    assert _value(text, "convoy_inference_batch_size_bucket", le="4", **batched) == 1
    assert _value(text, "convoy_inference_batch_size_bucket", le="2", **batched) == 0
    assert _value(text, "convoy_inference_batch_size_sum", **batched) == 4
    waiting_labels = {"model": "waiting", "version": "1"}
    assert _value(text, "nv_inference_request_success", **waiting_labels) == 1
    assert _value(text, "nv_inference_request_failure", reason="REJECTED", **waiting_labels) == 1
    assert _value(text, "nv_inference_request_failure", reason="CANCELED", **waiting_labels) == 1
    for labels in (plain, batched, waiting_labels):
        assert _value(text, "nv_inference_pending_request_count", **labels) == 0
        assert _value(text, "nv_model_load_duration_secs", **labels) > 0
    assert _value(text, "convoy_inference_request_duration_us_count", **plain) == 3
    assert _value(text, "convoy_inference_request_duration_us_bucket", le="+Inf", **plain) == 3
    assert "# TYPE nv_inference_count counter" in text
    assert "# TYPE convoy_inference_request_duration_us histogram" in text
    assert 0 <= _value(text, "nv_cpu_utilization") <= 1
    assert 0 < _value(text, "nv_cpu_memory_used_bytes") < _value(text, "nv_cpu_memory_total_bytes")


def test_flags_turn_metric_groups_off(start_server: StartServer, repository: Path) -> None:
    server = start_server(
        repository,
        "--allow-cpu-metrics",
        "false",
        "--metrics-config",
        "counter_latencies=false",
        "--metrics-config",
        "histogram_latencies=false",
    )
    text = server.metrics()
    assert "nv_inference_count{" in text
    for gone in ("nv_cpu_", "nv_inference_queue_duration_us", "convoy_inference_batch_size"):
        assert gone not in text
