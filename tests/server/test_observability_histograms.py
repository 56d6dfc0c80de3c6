"""Triton's latency histograms of one version: buckets from `model_metrics` over the defaults,
bad buckets refused, and what each kind of answer observes."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from batching import ExecutionRecord
from proto import model_config_pb2 as mc
from server.contract.errors import ConfigError
from server.core.observability.histograms import (
    DEFAULT_BUCKETS,
    FIRST_RESPONSE,
    QUEUE,
    REQUEST,
    LatencyHistograms,
    histogram_buckets,
)


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse('name: "m"\n' + text, mc.ModelConfig())


def _control(family: str, buckets: str) -> str:
    return (
        f'model_metrics {{ metric_control [ {{ metric_identifier {{ family: "{family}" }} '
        f"histogram_options {{ buckets: [ {buckets} ] }} }} ] }}"
    )


def test_defaults_are_tritons() -> None:
    buckets = histogram_buckets(_config(""))
    assert buckets == DEFAULT_BUCKETS
    assert buckets[FIRST_RESPONSE] == (100, 500, 2000, 5000)
    assert buckets[QUEUE] == (100, 1000, 5000, 10000, 50000)


def test_model_metrics_override_one_family() -> None:
    buckets = histogram_buckets(_config(_control(FIRST_RESPONSE, "-1, 0, 1, 2.5")))
    assert buckets[FIRST_RESPONSE] == (-1, 0, 1, 2.5)
    assert buckets[REQUEST] == DEFAULT_BUCKETS[REQUEST]


def test_an_unknown_family_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    assert histogram_buckets(_config(_control("nv_other", "1"))) == DEFAULT_BUCKETS
    assert "nv_other" in caplog.text


@pytest.mark.parametrize("buckets", ["5, 1", "1, 1", "1, inf", "nan"])
def test_buckets_must_be_finite_and_ascend(buckets: str) -> None:
    with pytest.raises(ConfigError, match="strictly ascending"):
        histogram_buckets(_config(_control(QUEUE, buckets)))


def test_a_success_observes_its_duration_queue_and_first_response() -> None:
    histograms = LatencyHistograms.from_config(_config(_control(FIRST_RESPONSE, "1, 5")))
    histograms.record_success(3_900_000, 100_000)
    assert histograms.first_response_ms.counts == [0, 1, 0]  # 3 whole ms, as Triton's
    assert histograms.first_response_ms.total == 3
    assert histograms.request_us.total == 3900.0
    assert histograms.request_us.counts[1] == 1  # 3900 us: in le=5000
    assert histograms.queue_us.counts[0] == 1  # 100 us: in le=100
    assert sum(histograms.compute_infer_us.counts) == 0


def test_an_execution_counts_its_compute_times_once_per_request() -> None:
    histograms = LatencyHistograms.from_config(_config(""))
    histograms.record_execution(ExecutionRecord(8, 3, 2_000, 1_500_000, 7_000, succeeded=True))
    assert histograms.compute_input_us.counts[0] == 3  # 2 us, for each of the 3 requests
    assert histograms.compute_input_us.total == 6.0
    assert histograms.compute_infer_us.counts[1] == 3  # 1500 us: in le=5000
    assert histograms.compute_output_us.total == 21.0


def test_a_decoupled_model_observes_its_first_response_apart() -> None:
    histograms = LatencyHistograms.from_config(
        _config("model_transaction_policy { decoupled: true }")
    )
    histograms.record_success(900_000_000, 0)
    histograms.record_answer(900_000_000)
    assert sum(histograms.first_response_ms.counts) == 0
    histograms.record_first_response(20_000_000)
    assert histograms.first_response_ms.counts == [1, 0, 0, 0, 0]
    assert sum(histograms.request_us.counts) == 1
