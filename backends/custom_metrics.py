"""Custom metrics: the families a Triton model.py registers with `pb_utils.MetricFamily`, kept
for the server's Prometheus page.

Families are the server's, as in Triton: two models (or two instances of one) that create a
family of the same name, kind and description share it, and a series (a family's `Metric`) is
named by its labels, so two instances that create the same labels count into one series. A
family or series lives while an instance that created it lives; when the last one ends (its
model is unloaded, or fails to load), it leaves the page.

Every request is a dict of plain values (a worker process sends it as JSON); `apply` answers
{"value": ...}, or {"error": message} for a request the model got wrong. Thread-safe: instances
ask from their own threads while the metrics thread scrapes.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("counter", "gauge", "histogram")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# The server's own families start so; a model's family of such a name would be mistaken for one.
_RESERVED_PREFIXES = ("nv_", "convoy_")

LabelKey = tuple[tuple[str, str], ...]  # a series' labels, sorted
# A family's series at most: a model that labels by request (an id, a timestamp) is told, rather
# than growing the server's memory and the metrics page without bound.
MAX_SERIES = 10_000


class MetricRequestError(ValueError):
    """A model asked for something its metrics cannot do; the message says what."""


@dataclass(slots=True)
class Series:
    """One series' state: a counter's or gauge's value, or a histogram's buckets."""

    value: float = 0.0  # a histogram: the sum of what it observed
    bounds: tuple[float, ...] = ()  # a histogram's upper bounds, increasing
    counts: list[int] = field(default_factory=list)  # per bucket, then one past the last
    owners: set[Hashable] = field(default_factory=set)  # the instances that created it


@dataclass(slots=True)
class Family:
    """One family: what it is, who holds it, and its series by labels."""

    name: str
    description: str
    kind: str
    owners: set[Hashable] = field(default_factory=set)
    series: dict[LabelKey, Series] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FamilySnapshot:
    """What the Prometheus page shows of one family, copied under the lock."""

    name: str
    description: str
    kind: str
    series: tuple[tuple[dict[str, str], Series], ...]


class CustomMetrics:
    """The server's custom metric families (one per server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, Family] = {}

    def apply(self, owner: Hashable, request: Mapping[str, Any]) -> dict[str, Any]:
        """Carry out one request of `owner` (an instance); its answer, or the error."""
        try:
            with self._lock:
                return {"value": self._apply(owner, request)}
        except MetricRequestError as exc:
            return {"error": str(exc)}

    def release(self, owner: Hashable) -> None:
        """`owner` ended: the families and series no other instance holds leave the page."""
        with self._lock:
            for name, family in list(self._families.items()):
                family.owners.discard(owner)
                for key, series in list(family.series.items()):
                    series.owners.discard(owner)
                    if not series.owners:
                        del family.series[key]
                if not family.owners:
                    del self._families[name]

    def snapshot(self) -> list[FamilySnapshot]:
        with self._lock:
            return [
                FamilySnapshot(
                    family.name,
                    family.description,
                    family.kind,
                    tuple(
                        (dict(key), Series(s.value, s.bounds, list(s.counts)))
                        for key, s in family.series.items()
                    ),
                )
                for family in self._families.values()
            ]

    def _apply(self, owner: Hashable, request: Mapping[str, Any]) -> float | None:
        op = request.get("op")
        if op == "family":
            self._family(owner, request)
            return None
        family = self._families.get(str(request.get("family")))
        if family is None or owner not in family.owners:
            raise MetricRequestError(f"metric family '{request.get('family')}' is not registered")
        key = _label_key(request.get("labels"))
        if op == "metric":
            self._metric(owner, family, key, request.get("buckets"))
            return None
        series = family.series.get(key)
        if series is None:
            raise MetricRequestError(f"{_where(family, key)} was not created")
        if op == "value":
            if family.kind == "histogram":
                raise MetricRequestError(f"{_where(family, key)}: a histogram has no value()")
            return series.value
        value = _number(request.get("value"))
        if op == "increment":
            if family.kind == "histogram":
                raise MetricRequestError(f"{_where(family, key)}: a histogram only observes")
            if family.kind == "counter" and value < 0:
                raise MetricRequestError(f"{_where(family, key)}: a counter cannot decrease")
            series.value += value
        elif op == "set":
            if family.kind != "gauge":
                raise MetricRequestError(f"{_where(family, key)}: only a gauge can be set")
            series.value = value
        elif op == "observe":
            if family.kind != "histogram":
                raise MetricRequestError(f"{_where(family, key)}: only a histogram observes")
            series.counts[bisect.bisect_left(series.bounds, value)] += 1
            series.value += value
        else:
            raise MetricRequestError(f"unknown metric request {op!r}")
        return None

    def _family(self, owner: Hashable, request: Mapping[str, Any]) -> None:
        name, description = str(request.get("name")), str(request.get("description", ""))
        kind = request.get("kind")
        if not _NAME.fullmatch(name):
            raise MetricRequestError(f"'{name}' is not a valid Prometheus metric name")
        if name.startswith(_RESERVED_PREFIXES):
            raise MetricRequestError(
                f"metric family '{name}': names starting with "
                f"{' or '.join(repr(p) for p in _RESERVED_PREFIXES)} are the server's own"
            )
        if kind not in KINDS:
            raise MetricRequestError(f"metric family '{name}': unknown kind {kind!r}")
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, description, str(kind))
        elif (family.kind, family.description) != (kind, description):
            raise MetricRequestError(
                f"metric family '{name}' is registered already as a {family.kind} described "
                f"{family.description!r}"
            )
        family.owners.add(owner)

    def _metric(self, owner: Hashable, family: Family, key: LabelKey, buckets: object) -> None:
        bounds: tuple[float, ...] = ()
        if family.kind == "histogram":
            if not isinstance(buckets, list | tuple) or not buckets:
                raise MetricRequestError(f"{_where(family, key)}: a histogram needs buckets")
            bounds = tuple(_number(b) for b in buckets)
            if any(b >= c for b, c in itertools.pairwise(bounds)) or any(
                math.isinf(b) for b in bounds
            ):
                raise MetricRequestError(
                    f"{_where(family, key)}: buckets must be finite and increasing"
                )
        elif buckets is not None:
            raise MetricRequestError(f"{_where(family, key)}: only a histogram has buckets")
        series = family.series.get(key)
        if series is None:
            if len(family.series) >= MAX_SERIES:
                raise MetricRequestError(
                    f"metric family '{family.name}' has {MAX_SERIES} series already, its limit "
                    "(labels that name a request, or a time, make a series each)"
                )
            series = family.series[key] = Series(0.0, bounds, [0] * (len(bounds) + 1))
        elif series.bounds != bounds:
            raise MetricRequestError(f"{_where(family, key)} exists with other buckets")
        series.owners.add(owner)


def _label_key(labels: object) -> LabelKey:
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise MetricRequestError("a metric's labels must be a dict of strings")
    for name, value in labels.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise MetricRequestError("a metric's labels must be a dict of strings")
        if not _LABEL.fullmatch(name) or name.startswith("__"):
            raise MetricRequestError(f"'{name}' is not a valid Prometheus label name")
    return tuple(sorted(labels.items()))


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise MetricRequestError(f"a metric's value must be a number, not {value!r}")
    return float(value)


def _where(family: Family, key: LabelKey) -> str:
    labels = ", ".join(f"{k}={v!r}" for k, v in key)
    return f"metric '{family.name}'{{{labels}}}"
