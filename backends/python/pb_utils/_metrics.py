"""Triton's custom metrics: `MetricFamily` and its series (`Metric`), checked here and kept by
the server."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._errors import TritonModelException
from ._server import _ask_server, _update_metrics


class MetricFamily:
    """Triton's custom metrics: a family of Prometheus series the model updates, on the server's
    metrics page beside Triton's own. A family of the same name, kind and description created
    again (by another instance, or another model) is the same family."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(
                "MetricFamily: kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM"
            )
        self._name = name
        self._kind = kind
        _ask_server({"op": "family", "name": name, "description": description, "kind": kind})

    def Metric(  # Triton's name
        self, labels: Mapping[str, str] | None = None, buckets: Iterable[float] | None = None
    ) -> Metric:
        """The family's series with these labels (created when it is new); a histogram's needs
        its buckets' upper bounds, increasing."""
        return Metric(self._name, self._kind, dict(labels or {}), buckets)


class Metric:
    """One series of a MetricFamily (made by `MetricFamily.Metric`)."""

    def __init__(
        self,
        family: str,
        kind: str,
        labels: dict[str, str],
        buckets: Iterable[float] | None = None,
    ) -> None:
        self._family = family
        self._labels = labels
        self._target = {"family": family, "labels": labels}  # what each request names
        self._kind = kind
        bounds = None if buckets is None else [float(bound) for bound in buckets]
        _ask_server({"op": "metric", **self._target, "buckets": bounds})

    # Updates are checked here, so that a worker sends them without waiting for an answer.

    def increment(self, value: float) -> None:
        """Add `value` (a counter's must not be negative)."""
        amount = float(value)
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: a histogram only observes")
        if self._kind == MetricFamily.COUNTER and amount < 0:
            raise TritonModelException(f"{self._where()}: a counter cannot decrease")
        _update_metrics({"op": "increment", **self._target, "value": amount})

    def set(self, value: float) -> None:
        """A gauge's new value."""
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException(f"{self._where()}: only a gauge can be set")
        _update_metrics({"op": "set", **self._target, "value": float(value)})

    def observe(self, value: float) -> None:
        """One observation of a histogram."""
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: only a histogram observes")
        _update_metrics({"op": "observe", **self._target, "value": float(value)})

    def value(self) -> float:
        """A counter's or gauge's value now (what every instance added up)."""
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"{self._where()}: a histogram has no value()")
        return float(_ask_server({"op": "value", **self._target}))

    def _where(self) -> str:
        labels = ", ".join(f"{k}={v!r}" for k, v in sorted(self._labels.items()))
        return f"metric '{self._family}'{{{labels}}}"
