"""The performance pages' plots, drawn when the site is built (mkdocs-gen-files runs this file)
from the dated benchmark results under docs/performance/results/: the newest file of each
benchmark is the one drawn. Each plot is an SVG at performance/plots/<name>.svg in the site."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: the site is built headless

import matplotlib.pyplot as plt
import mkdocs_gen_files

RESULTS = Path(__file__).parent / "performance" / "results"
COLOURS = {"Convoy": "#3f51b5", "Triton": "#76b900", "other": "#9e9e9e", "ceiling": "#e53935"}


def _latest(benchmark: str) -> dict[str, Any]:
    """The newest results file of a benchmark (`<date>-<benchmark>.json`; a later run on the
    same day adds a letter to its date: `<date>b-<benchmark>.json`)."""
    files = sorted(RESULTS.glob(f"*-{benchmark}.json"))
    if not files:
        raise SystemExit(f"no {benchmark} results under {RESULTS}")
    result: dict[str, Any] = json.loads(files[-1].read_text(encoding="utf-8"))
    return result


def _save(figure: Any, name: str) -> None:
    buffer = io.StringIO()
    # No date and fixed ids: the same results always draw the same file.
    plt.rcParams["svg.hashsalt"] = name
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    with mkdocs_gen_files.open(f"performance/plots/{name}.svg", "w") as out:
        out.write(buffer.getvalue())


def backends_plot() -> None:
    """Each backend's infer/s over its step's ceiling at c = 1, 8, 32: Convoy and Triton, over
    the wire and through shared memory."""
    results = _latest("backends")
    backends = ["ONNX Runtime", "PyTorch", "OpenVINO"]
    concurrencies = [1, 8, 32]
    series = [
        ("Convoy", "wire", COLOURS["Convoy"], ""),
        ("Convoy", "shm", COLOURS["Convoy"], "//"),
        ("Triton 2.51", "wire", COLOURS["Triton"], ""),
        ("Triton 2.51", "shm", COLOURS["Triton"], "//"),
    ]
    figure, axes = plt.subplots(1, 3, figsize=(11, 3.4), sharey=True)
    width = 0.2
    for axis, backend in zip(axes, backends, strict=True):
        for index, (server, inputs, colour, hatch) in enumerate(series):
            values = [
                next(
                    row["of_step_ceiling"]
                    for row in results["rows"]
                    if (row["server"], row["backend"], row["inputs"], row["concurrency"])
                    == (server, backend, inputs, c)
                )
                for c in concurrencies
            ]
            positions = [i + (index - 1.5) * width for i in range(len(concurrencies))]
            axis.bar(
                positions,
                values,
                width,
                color=colour,
                hatch=hatch,
                edgecolor="white",
                label=f"{server}, {inputs}",
            )
        axis.axhline(0.9, color=COLOURS["ceiling"], linewidth=1, linestyle="--")
        axis.set_xticks(range(len(concurrencies)), [f"c = {c}" for c in concurrencies])
        axis.set_title(backend)
        axis.set_ylim(0, 1.05)
    axes[0].set_ylabel("infer/s over the step's ceiling")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.1))
    figure.suptitle(
        f"resnet18 served by each backend ({results['date']}; dashed: the 0.9 target)", y=1.04
    )
    _save(figure, "backends")


def front_ends_plot() -> None:
    """mlp at c = 32 by front end: Convoy in process against Triton live, run by run."""
    results = _latest("bench")
    rows = [row for row in results["rows"] if row["model"] == "mlp"]
    labels = [f"{row['front_end']}\nrun {row['run']}" for row in rows]
    figure, axis = plt.subplots(figsize=(9, 3.4))
    width = 0.38
    positions = range(len(rows))
    axis.bar(
        [p - width / 2 for p in positions],
        [row["convoy"] for row in rows],
        width,
        color=COLOURS["Convoy"],
        label="Convoy, in process",
    )
    axis.bar(
        [p + width / 2 for p in positions],
        [row["triton"] or 0 for row in rows],
        width,
        color=COLOURS["Triton"],
        label="Triton 2.51 live",
    )
    for position, row in zip(positions, rows, strict=True):
        if row["triton"] is None:  # Triton's measurement did not finish
            axis.text(position + width / 2, 0, " no result", rotation=90, fontsize="x-small")
    axis.set_xticks(list(positions), labels, fontsize="small")
    axis.set_ylabel("infer/s")
    axis.legend(fontsize="small")
    axis.set_title(f"mlp at concurrency 32 ({results['date']})")
    _save(figure, "front-ends")


def resnet18_plot() -> None:
    """resnet18 over unary gRPC against concurrency: Convoy, Triton live, the naive FastAPI and
    the ceiling."""
    results = _latest("bench")
    rows = [row for row in results["rows"] if row["model"] == "resnet18"]
    concurrencies = [row["concurrency"] for row in rows]
    figure, axis = plt.subplots(figsize=(6, 3.4))
    for key, label, colour in (
        ("convoy", "Convoy, in process", COLOURS["Convoy"]),
        ("triton", "Triton 2.51 live", COLOURS["Triton"]),
        ("naive_fastapi", "naive FastAPI", COLOURS["other"]),
    ):
        axis.plot(concurrencies, [row[key] for row in rows], marker="o", color=colour, label=label)
    axis.axhline(rows[0]["ceiling"], color=COLOURS["ceiling"], linestyle="--", label="ceiling")
    axis.set_xscale("log", base=2)
    axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
    axis.set_xlabel("concurrency")
    axis.set_ylabel("infer/s")
    axis.set_ylim(0, rows[0]["ceiling"] * 1.1)
    axis.legend(fontsize="small", loc="lower right")
    axis.set_title(f"resnet18, unary gRPC ({results['date']})")
    _save(figure, "resnet18")


backends_plot()
front_ends_plot()
resnet18_plot()
