"""The load report a balancer asks for with `endpoint-load-metrics-format` (Triton #7839's ORCA
header): the request names a format, TEXT or JSON in any case; the response carries
`endpoint-load-metrics`, the report's values as ORCA named metrics under the names of the
Prometheus families they mirror. Any other format gets no report, as Triton logs and sends none;
a balancer's header never fails a request."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from server.contract.load import LoadReport

FORMAT_HEADER = "endpoint-load-metrics-format"  # the request's: text or json
REPORT_HEADER = "endpoint-load-metrics"  # the response's
FORMATS = ("text", "json")


def requested_format(values: Iterable[str]) -> str | None:
    """The first value naming a known format, lowercase (None: no report is wanted)."""
    for value in values:
        wanted = value.strip().lower()
        if wanted in FORMATS:
            return wanted
    return None


def metadata_format(metadata: Iterable[tuple[str, str]] | None) -> str | None:
    """`requested_format` of a gRPC call's metadata (its keys lowercase, a key may repeat)."""
    # One pass, into a list: a generator costs more on every call, almost all asking nothing.
    return requested_format([value for key, value in metadata or () if key == FORMAT_HEADER])


def header_format(headers: Mapping[str, str]) -> str | None:
    """`requested_format` of an HTTP request's headers (looked up in any case)."""
    wanted = headers.get(FORMAT_HEADER)
    return None if wanted is None else requested_format((wanted,))


def report_headers(report: LoadReport | None, form: str | None) -> tuple[tuple[str, str], ...]:
    """The response's `endpoint-load-metrics` header when a format was asked for and the load is
    known (the model may have been unloaded meanwhile); else none."""
    if form is None or report is None:
        return ()
    return ((REPORT_HEADER, report_header(report, form)),)


def named_metrics(report: LoadReport) -> dict[str, int | float]:
    return {
        "nv_inference_pending_request_count": report.queue_length,
        "convoy_inference_inflight_requests": report.in_flight,
        "convoy_load_ratio": report.load_ratio,
    }


def report_header(report: LoadReport, form: str) -> str:
    """The `endpoint-load-metrics` value: `TEXT named_metrics.NAME=VALUE, ...` or
    `JSON {"named_metrics": {...}}` (`form` from `requested_format`)."""
    metrics = named_metrics(report)
    if form == "json":
        return "JSON " + json.dumps({"named_metrics": metrics}, separators=(",", ":"))
    return "TEXT " + ", ".join(f"named_metrics.{name}={value!r}" for name, value in metrics.items())
