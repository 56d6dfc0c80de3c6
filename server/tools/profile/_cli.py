"""`convoy profile MODEL --model-repository DIR`: the command line, the progress bars, and what
it writes (table on stdout; curve.png, report.html, config.pbtxt and points.json per model)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from backends import usable_cores
from proto import model_config_pb2 as mc
from server.contract.errors import ServerError
from server.core.repository import Repository, read_config
from server.tools._units import budget_bytes, format_bytes
from server.tools.profile._chart import draw, page
from server.tools.profile._choose import Choice, choose
from server.tools.profile._points import Point
from server.tools.profile._report import COLUMNS, recommended_config, rows, summary
from server.tools.profile._share import Shared, share
from server.tools.profile._space import variants
from server.tools.profile._sweep import Plan, sweep, window_for

SHARE_OF_BUDGET = 0.25  # with several models: the time for measuring them all at once
TABLE_WIDTH = 160  # characters, when stdout is not a terminal


def _numbers(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got '{text}'"
        ) from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected numbers >= 0, got '{text}'")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convoy profile",
        description="Measure a model's latency-throughput curve through Convoy's own batcher "
        "and instances, for each configuration tried, and recommend the one with the most "
        "throughput under a latency objective.",
    )
    parser.add_argument("model", nargs="?", help="the model to profile")
    parser.add_argument("--model-repository", required=True, type=Path, metavar="DIR")
    parser.add_argument(
        "--models",
        default="",
        metavar="A,B,C",
        help="profile several models, then measure "
        "them all at once at their recommendations (how they share the machine)",
    )
    parser.add_argument("--concurrency", type=_numbers, default=[1, 4, 16], metavar="N,N")
    parser.add_argument(
        "--instances",
        type=_numbers,
        default=[1, 2],
        metavar="N,N",
        help="instance counts to try (default 1,2)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=_numbers,
        default=[],
        metavar="N,N",
        help="max_batch_size values to try (default: the config's)",
    )
    parser.add_argument(
        "--preferred-batch-size",
        type=_numbers,
        default=[],
        metavar="N,N",
        help="one preferred batch size per try, 0 for none (default: the config's)",
    )
    parser.add_argument(
        "--queue-delay-us",
        type=_numbers,
        default=[],
        metavar="US,US",
        help="max_queue_delay_microseconds values to try (default: the config's)",
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        default=60.0,
        help="seconds of measurement in all (loading adds its own)",
    )
    parser.add_argument(
        "--latency-p99-ms",
        type=float,
        default=None,
        help="the objective: the recommendation has p99 at or below it",
    )
    parser.add_argument(
        "--url", default=None, metavar="HOST:PORT", help="also measure a running server over gRPC"
    )
    parser.add_argument(
        "--memory-budget",
        type=budget_bytes,
        default="auto",
        metavar="BYTES|auto",
        help="for --models: the memory they share",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("profile"),
        metavar="DIR",
        help="where to write each model's files (default ./profile)",
    )
    return parser


class _Bars:
    """A progress bar per configuration, with its ETA, over an overall bar with its ETA."""

    def __init__(self, progress: Progress, total_s: float) -> None:
        self._progress = progress
        self._all = progress.add_task("all", total=total_s)
        self._current: TaskID | None = None

    def begin(self, label: str, seconds: float) -> None:
        self._current = self._progress.add_task(label, total=seconds)

    def advance(self, seconds: float) -> None:
        self._progress.advance(self._all, seconds)
        if self._current is not None:
            self._progress.advance(self._current, seconds)

    def end(self) -> None:
        if self._current is not None:
            task = self._progress.tasks[self._current]
            self._progress.update(self._current, completed=task.total)


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    names = [n for n in ([args.model] if args.model else []) + args.models.split(",") if n]
    names = list(dict.fromkeys(names))
    if not names:
        parser.error("name a MODEL or --models")
    if not args.concurrency or 0 in args.concurrency:
        parser.error("--concurrency needs levels >= 1")
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    try:
        return asyncio.run(_profile(args, names))
    except (ServerError, RuntimeError) as exc:
        print(f"convoy profile: {exc}", file=sys.stderr)
        return 1


async def _profile(args: argparse.Namespace, names: list[str]) -> int:
    sweep_s = args.time_budget_s * (1 - SHARE_OF_BUDGET if len(names) > 1 else 1)
    tries = variants(
        args.instances, args.max_batch_size, args.preferred_batch_size, args.queue_delay_us
    )
    plans = []
    for name in names:
        raw = read_config(args.model_repository / name) or mc.ModelConfig()
        count = len(args.concurrency) * (len(tries) + (1 if args.url else 0))
        window = window_for(sweep_s / len(names), count)
        plans.append(Plan(name, raw, tries, args.concurrency, args.url, window))
    total_s = sum(plan.window.total_s * plan.point_count for plan in plans)
    share_window = window_for(args.time_budget_s * SHARE_OF_BUDGET, 1)
    if len(names) > 1:
        total_s += share_window.total_s
    # Piped output gets a table as wide as its columns need, not 80 columns of folded cells.
    console = Console(width=None if sys.stdout.isatty() else TABLE_WIDTH)
    repository = Repository([args.model_repository])
    chosen: list[tuple[str, mc.ModelConfig, Choice]] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    ) as progress:
        bars = _Bars(progress, total_s)
        try:
            for plan in plans:
                points = await sweep(repository, plan, bars)
                choice = choose(points, args.latency_p99_ms)
                _write(args, plan, points, choice, console)
                if choice is not None:
                    chosen.append((plan.model, plan.raw, choice))
            shared = None
            if len(chosen) > 1:
                bars.begin("all models at once", share_window.total_s)
                shared = await share(repository, chosen, share_window, bars.advance)
                bars.end()
        finally:
            await repository.unload_all(timeout_s=30)
    if shared is not None:
        _print_shared(console, shared, args.memory_budget)
    return 0 if chosen else 1


def _write(
    args: argparse.Namespace,
    plan: Plan,
    points: list[Point],
    choice: Choice | None,
    console: Console,
) -> None:
    table = Table(title=f"{plan.model}: {plan.window.measure_s:.1f} s per point")
    for column in COLUMNS:
        table.add_column(
            column, justify="left" if column in ("configuration", "where") else "right"
        )
    for row in rows(points, choice):
        table.add_row(*row)
    console.print(table)
    out = args.out / plan.model
    out.mkdir(parents=True, exist_ok=True)
    (out / "points.json").write_text(json.dumps([asdict(p) for p in points], indent=2) + "\n")
    config_text = ""
    if choice is None:
        console.print(f"{plan.model}: nothing was measured in process; no recommendation")
    else:
        measured_on = f"in process on {usable_cores()} core(s)"
        config_text = recommended_config(plan.raw, choice, args.latency_p99_ms, measured_on)
        (out / "config.pbtxt").write_text(config_text)
        console.print(f"{plan.model}: recommended {summary(choice, args.latency_p99_ms)}")
    title = f"{plan.model}: latency against throughput"
    svg = draw(title, points, choice, args.latency_p99_ms, out / "curve.png")
    (out / "report.html").write_text(page(title, svg, points, choice, config_text))
    console.print(f"{plan.model}: wrote {out}/config.pbtxt, curve.png, report.html, points.json")


def _print_shared(console: Console, shared: list[Shared], budget_bytes: int) -> None:
    table = Table(title="sharing the machine: each at its recommendation, all at once")
    for column in ("model", "memory", "conc", "alone infer/s", "together infer/s", "kept"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for one in shared:
        table.add_row(
            one.model,
            format_bytes(one.memory_bytes),
            str(one.alone.concurrency),
            f"{one.alone.infer_per_s:.1f}",
            f"{one.together.infer_per_s:.1f}",
            f"{100 * one.kept:.0f}%",
        )
    console.print(table)
    total = sum(one.memory_bytes for one in shared)
    verdict = "fits" if total <= budget_bytes else "does NOT fit"
    console.print(
        f"memory: {format_bytes(total)} in all against a budget of {format_bytes(budget_bytes)}: "
        f"{verdict}"
    )
