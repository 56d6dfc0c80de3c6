"""The server's custom metric families (`backends.CustomMetrics`): what a model.py's
`pb_utils.MetricFamily` and its series may do, shared by name and labels, kept while an instance
that created them lives."""

from __future__ import annotations

from typing import Any

import pytest

from backends import CustomMetrics
from backends.custom_metrics import MAX_SERIES

FIRST, SECOND = "instance 0", "instance 1"


def family(metrics: CustomMetrics, owner: str, name: str, kind: str, about: str = "") -> Any:
    return metrics.apply(owner, {"op": "family", "name": name, "description": about, "kind": kind})


def series(metrics: CustomMetrics, owner: str, name: str, **request: Any) -> Any:
    return metrics.apply(owner, {"family": name, "labels": {"model": "m"}, **request})


def shown(metrics: CustomMetrics) -> dict[str, list[tuple[dict[str, str], float, list[int]]]]:
    return {
        f.name: [(labels, s.value, s.counts) for labels, s in f.series] for f in metrics.snapshot()
    }


def test_instances_count_into_one_series_of_one_family() -> None:
    metrics = CustomMetrics()
    for owner in (FIRST, SECOND):
        assert family(metrics, owner, "seen", "counter", "requests seen") == {"value": None}
        assert series(metrics, owner, "seen", op="metric") == {"value": None}
    series(metrics, FIRST, "seen", op="increment", value=2)
    series(metrics, SECOND, "seen", op="increment", value=3.5)
    assert series(metrics, FIRST, "seen", op="value") == {"value": 5.5}
    assert shown(metrics) == {"seen": [({"model": "m"}, 5.5, [0])]}


def test_a_gauge_is_set_and_moves_both_ways() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "level", "gauge")
    series(metrics, FIRST, "level", op="metric")
    series(metrics, FIRST, "level", op="set", value=10)
    series(metrics, FIRST, "level", op="increment", value=-4)
    assert series(metrics, FIRST, "level", op="value") == {"value": 6.0}


def test_a_histogram_counts_each_observation_in_its_bucket() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "sizes", "histogram")
    series(metrics, FIRST, "sizes", op="metric", buckets=[1, 10])
    for value in (0.5, 1, 5, 50):
        series(metrics, FIRST, "sizes", op="observe", value=value)
    # le=1 holds 0.5 and 1 (Prometheus buckets are inclusive), le=10 holds 5, past it 50.
    assert shown(metrics) == {"sizes": [({"model": "m"}, 56.5, [2, 1, 1])]}


@pytest.mark.parametrize(
    ("kind", "request_", "error"),
    [
        ("counter", {"op": "increment", "value": -1}, "a counter cannot decrease"),
        ("counter", {"op": "set", "value": 1}, "only a gauge can be set"),
        ("gauge", {"op": "observe", "value": 1}, "only a histogram observes"),
        ("histogram", {"op": "value"}, "a histogram has no value()"),
        ("histogram", {"op": "increment", "value": 1}, "a histogram only observes"),
        ("gauge", {"op": "set", "value": "high"}, "must be a number"),
        ("gauge", {"op": "set", "value": float("nan")}, "must be a number"),
    ],
)
def test_what_a_kind_cannot_do_is_refused(kind: str, request_: dict[str, Any], error: str) -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "f", kind)
    buckets = [1.0] if kind == "histogram" else None
    series(metrics, FIRST, "f", op="metric", buckets=buckets)
    assert error in series(metrics, FIRST, "f", **request_)["error"]


@pytest.mark.parametrize(
    ("name", "kind", "error"),
    [
        ("2fast", "counter", "not a valid Prometheus metric name"),
        ("nv_inference_count", "counter", "are the server's own"),
        ("convoy_mine", "gauge", "are the server's own"),
        ("fine", "summary", "unknown kind"),
    ],
)
def test_a_family_needs_a_free_valid_name_and_a_known_kind(
    name: str, kind: str, error: str
) -> None:
    assert error in family(CustomMetrics(), FIRST, name, kind)["error"]


def test_a_name_registered_differently_is_refused() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "seen", "counter", "requests seen")
    assert "registered already as a counter" in family(metrics, SECOND, "seen", "gauge")["error"]
    other = family(metrics, SECOND, "seen", "counter", "other words")
    assert "registered already" in other["error"]


def test_series_need_string_labels_and_a_histogram_increasing_buckets() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "h", "histogram")
    family(metrics, FIRST, "c", "counter")
    answers = [
        metrics.apply(FIRST, {"op": "metric", "family": "h", "labels": {}, "buckets": None}),
        metrics.apply(FIRST, {"op": "metric", "family": "h", "labels": {}, "buckets": [2, 1]}),
        metrics.apply(FIRST, {"op": "metric", "family": "c", "labels": {}, "buckets": [1]}),
        metrics.apply(FIRST, {"op": "metric", "family": "c", "labels": {"a": 1}}),
        metrics.apply(FIRST, {"op": "metric", "family": "c", "labels": {"__a": "x"}}),
        metrics.apply(FIRST, {"op": "increment", "family": "c", "labels": {}, "value": 1}),
        metrics.apply(FIRST, {"op": "metric", "family": "missing", "labels": {}}),
    ]
    errors = [answer["error"] for answer in answers]
    assert "needs buckets" in errors[0]
    assert "finite and increasing" in errors[1]
    assert "only a histogram has buckets" in errors[2]
    assert "dict of strings" in errors[3]
    assert "not a valid Prometheus label name" in errors[4]
    assert "was not created" in errors[5]
    assert "'missing' is not registered" in errors[6]


def test_what_its_last_instance_created_leaves_with_it() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "seen", "counter")
    family(metrics, SECOND, "seen", "counter")
    metrics.apply(FIRST, {"op": "metric", "family": "seen", "labels": {"model": "a"}})
    metrics.apply(SECOND, {"op": "metric", "family": "seen", "labels": {"model": "b"}})
    metrics.release(FIRST)
    assert shown(metrics) == {"seen": [({"model": "b"}, 0.0, [0])]}
    metrics.release(SECOND)
    assert shown(metrics) == {}


def test_a_snapshot_is_a_copy() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "sizes", "histogram")
    series(metrics, FIRST, "sizes", op="metric", buckets=[1])
    before = metrics.snapshot()
    series(metrics, FIRST, "sizes", op="observe", value=0.5)
    assert before[0].series[0][1].counts == [0, 0]


def test_a_family_holds_a_bounded_number_of_series() -> None:
    metrics = CustomMetrics()
    family(metrics, FIRST, "by_request", "counter")
    for index in range(MAX_SERIES):
        labels = {"request": str(index)}
        assert metrics.apply(FIRST, {"op": "metric", "family": "by_request", "labels": labels})
    one_more = {"op": "metric", "family": "by_request", "labels": {"request": "again"}}
    assert "its limit" in metrics.apply(FIRST, one_more)["error"]
    existing = {"op": "metric", "family": "by_request", "labels": {"request": "0"}}
    assert metrics.apply(FIRST, existing) == {"value": None}  # an existing one is still served
