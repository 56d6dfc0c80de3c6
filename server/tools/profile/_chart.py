"""The latency-throughput picture: one curve per configuration (its points are concurrency
levels), the objective as a line and the chosen point marked; as a PNG and as a self-contained
HTML page (the picture inline as SVG, the table and the recommended config)."""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from pathlib import Path

from server.tools.profile._choose import Choice
from server.tools.profile._points import Point
from server.tools.profile._report import COLUMNS, rows


def draw(
    title: str,
    points: Sequence[Point],
    choice: Choice | None,
    latency_p99_ms: float | None,
    png_path: Path,
) -> str:
    """Write the PNG; return the same picture as SVG text for the HTML page."""
    try:
        import matplotlib
    except ImportError as exc:
        raise RuntimeError("the picture needs matplotlib: pip install 'convoy[profile]'") from exc
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 5), dpi=100)
    curves: dict[str, list[Point]] = {}
    for point in points:
        curves.setdefault(point.curve, []).append(point)
    for label, curve in curves.items():
        ordered = sorted(curve, key=lambda p: p.concurrency)
        style = "--" if ordered[0].where != "in process" else "-"
        axes.plot(
            [p.infer_per_s for p in ordered],
            [p.p99_ms for p in ordered],
            style,
            marker="o",
            label=label,
        )
        for p in ordered:
            axes.annotate(
                f"c={p.concurrency}",
                (p.infer_per_s, p.p99_ms),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
    if latency_p99_ms is not None:
        axes.axhline(
            latency_p99_ms, color="red", linestyle=":", label=f"p99 objective {latency_p99_ms:g} ms"
        )
    if choice is not None:
        axes.plot(
            [choice.point.infer_per_s],
            [choice.point.p99_ms],
            marker="*",
            markersize=18,
            color="gold",
            markeredgecolor="black",
            linestyle="none",
            label="recommended",
        )
    axes.set_xlabel("throughput (infer/s)")
    axes.set_ylabel("p99 latency (ms)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png_path)
    svg = io.StringIO()
    figure.savefig(svg, format="svg")
    pyplot.close(figure)
    return svg.getvalue()


def page(
    title: str, svg: str, points: Sequence[Point], choice: Choice | None, config_text: str
) -> str:
    """A self-contained HTML page: nothing to fetch, one file to keep or send."""
    head = "".join(f"<th>{html.escape(column)}</th>" for column in COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in rows(points, choice)
    )
    svg_body = svg[svg.index("<svg") :]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "pre{background:#f4f4f4;padding:1em}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{svg_body}"
        f"<h2>Measurements</h2><table><tr>{head}</tr>{body}</table>"
        f"<h2>Recommended config.pbtxt</h2><pre>{html.escape(config_text)}</pre>"
        "</body></html>\n"
    )
