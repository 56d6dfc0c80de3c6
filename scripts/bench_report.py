"""What scripts/bench.py prints from its rows: the ratio and worker-scaling tables, issue 13's
targets checked against one run, and the text of every table. Pure: no process, clock or I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scripts.bench_results import (
    CANNED,
    CONVOY,
    TRITON,
    TRITON_QUOTED,
    Ceiling,
    Lookup,
    Quoted,
    Row,
    ratio,
)


@dataclass(frozen=True, slots=True)
class RatioLine:
    """One of Convoy's `on` rows against every baseline measured at its concurrency."""

    model: str
    front_end: str
    concurrency: int
    workers: int
    infer_per_s: float | None
    vs_ceiling: float | None  # / in-process ONNX Runtime at its best batch size
    vs_fastapi: float | None  # / the faster naive FastAPI form (wrk, raw bytes)
    vs_in_process: float | None  # / Convoy with the in-process front end, same front end
    vs_canned: float | None  # / the bare grpc.aio server (unary gRPC only)
    vs_triton_live: float | None  # / Triton 2.51 run by this bench (--triton)
    triton_quoted: Quoted | None
    vs_triton_quoted: float | None  # / triton_quoted.high


def ratio_lines(look: Lookup) -> list[RatioLine]:
    lines = []
    for r in look.rows:
        if r.system != CONVOY or r.batching != "on" or r.workers is None:
            continue
        rate = r.measured.infer_per_s if r.measured else None
        c, fe = r.concurrency, r.front_end
        quoted = TRITON_QUOTED.get((r.model, fe, c))
        lines.append(
            RatioLine(
                model=r.model,
                front_end=fe,
                concurrency=c,
                workers=r.workers,
                infer_per_s=rate,
                vs_ceiling=ratio(rate, look.ceiling(r.model)),
                vs_fastapi=ratio(rate, look.fastapi(r.model, c)),
                vs_in_process=ratio(rate, look.convoy(r.model, fe, 0, c)),
                vs_canned=ratio(rate, look.rate(CANNED, r.model, "none", fe, None, c)),
                vs_triton_live=ratio(rate, look.rate(TRITON, r.model, "on", fe, None, c)),
                triton_quoted=quoted,
                vs_triton_quoted=ratio(rate, quoted.high if quoted else None),
            )
        )
    return lines


@dataclass(frozen=True, slots=True)
class ScalingLine:
    """Convoy's `on` variant at one front end and concurrency with N front-end workers."""

    model: str
    front_end: str
    concurrency: int
    workers: int
    infer_per_s: float | None
    server_cpu: float | None  # 1.0: one core busy
    vs_in_process: float | None  # / N = 0
    efficiency: float | None  # infer/s / (N x infer/s with one worker); None for N = 0


def scaling_lines(look: Lookup) -> list[ScalingLine]:
    """For each model and front end measured with several worker counts, at its highest
    concurrency."""
    lines = []
    convoy = [r for r in look.rows if r.system == CONVOY and r.batching == "on"]
    for model, fe in dict.fromkeys((r.model, r.front_end) for r in convoy):
        mine = [r for r in convoy if (r.model, r.front_end) == (model, fe)]
        if len({r.workers for r in mine}) < 2:
            continue
        c = max(r.concurrency for r in mine)
        one = look.convoy(model, fe, 1, c)
        for r in sorted((r for r in mine if r.concurrency == c), key=lambda r: r.workers or 0):
            n = r.workers or 0
            rate = r.measured.infer_per_s if r.measured else None
            lines.append(
                ScalingLine(
                    model=model,
                    front_end=fe,
                    concurrency=c,
                    workers=n,
                    infer_per_s=rate,
                    server_cpu=r.server_cpu,
                    vs_in_process=ratio(rate, look.convoy(model, fe, 0, c)),
                    efficiency=ratio(rate, n * one if n and one else None),
                )
            )
    return lines


@dataclass(frozen=True, slots=True)
class Check:
    """One of issue 13's targets: each value must be at least `threshold`."""

    target: str
    threshold: float
    values: tuple[tuple[str, float | None], ...]  # (which Convoy, e.g. "N=1", ratio)
    note: str = ""


def checks(look: Lookup, cores: int) -> list[Check]:
    """The targets whose measurements this run has, at every worker count where they apply."""
    out: list[Check] = []
    served = {
        (r.model, r.front_end, r.concurrency)
        for r in look.rows
        if r.system == CONVOY and r.batching == "on"
    }
    every_n = look.workers()

    def add(
        what: tuple[str, str, int],
        target: str,
        threshold: float,
        base: float | None,
        ns: Sequence[int] = every_n,
    ) -> None:
        """Convoy's `on` at `what` (model, front end, concurrency) / `base`, for each N."""
        model, fe, c = what
        if what in served and ns:
            values = tuple((f"N={n}", ratio(look.convoy(model, fe, n, c), base)) for n in ns)
            out.append(Check(f"{model} {fe} @{c} {target}", threshold, values))

    for c in (8, 32):
        add(("resnet18", "grpc", c), "/ ceiling", 0.9, look.ceiling("resnet18"))
    for c, threshold in ((1, 0.9), (8, 1.0), (32, 1.0)):
        add(("resnet18", "grpc", c), "/ fastapi", threshold, look.fastapi("resnet18", c))
    in_process = look.convoy("mlp", "grpc", 0, 32)
    with_workers = [n for n in every_n if n > 0]
    add(("mlp", "grpc", 32), "with workers / in-process", 1.2, in_process, with_workers)
    canned = look.rate(CANNED, "mlp", "none", "grpc", None, 32)
    add(
        ("mlp", "grpc", 32), "in-process / bare grpc.aio", 0.85, canned, [0] if 0 in every_n else []
    )
    for (model, fe, c), quoted in TRITON_QUOTED.items():
        if fe in ("stream", "http"):
            add((model, fe, c), f"/ Triton 2.51 quoted {quoted.text()}", 1.0, quoted.high)
    scaling = [
        s
        for s in scaling_lines(look)
        if (s.model, s.front_end) == ("mlp", "grpc") and 2 <= s.workers <= 4
    ]
    if scaling:
        note = "" if cores >= 8 else f"(a target on >= 8 cores; this machine has {cores})"
        values = tuple((f"N={s.workers}", s.efficiency) for s in scaling)
        target = f"mlp grpc @{scaling[0].concurrency} N workers / (N x one worker)"
        out.append(Check(target, 0.7, values, note))
    return out


def batching_ratios(look: Lookup) -> dict[str, float | None]:
    """What batching buys with the in-process front end: on/off, and what the adaptive delay (on
    by default) buys over Triton's wait (`wait`)."""
    out: dict[str, float | None] = {}
    cs = sorted({r.concurrency for r in look.rows})
    if not cs:
        return out
    low, high = cs[0], cs[-1]

    def rate(model: str, batching: str, c: int) -> float | None:
        return look.rate(CONVOY, model, batching, "grpc", 0, c)

    def p50(model: str, batching: str, c: int) -> float | None:
        m = look.measured(CONVOY, model, batching, "grpc", 0, c)
        return m.p50_ms if m else None

    for model in dict.fromkeys(r.model for r in look.rows if r.batching == "off"):
        out[f"{model} on/off @{high}"] = ratio(rate(model, "on", high), rate(model, "off", high))
    if any(r.batching == "wait" for r in look.rows):
        out[f"mlp on/off p50 @{low}"] = ratio(p50("mlp", "on", low), p50("mlp", "off", low))
        for c in cs:  # what ending waits early buys at each concurrency
            out[f"mlp on/wait infer/s @{c}"] = ratio(rate("mlp", "on", c), rate("mlp", "wait", c))
    return out


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def columns(header: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks."""
    table = [list(header), *(list(line) for line in lines)]
    widths = [max(len(line[i]) for line in table) + 2 for i in range(len(header))]
    return "\n".join(
        "".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def row_cells(row: Row, gpu: bool = False) -> list[str]:
    m = row.measured
    cells = [
        row.system,
        row.model,
        row.batching,
        row.front_end,
        "-" if row.workers is None else str(row.workers),
        str(row.concurrency),
        *([_number(m.infer_per_s), f"{m.p50_ms:.2f}", f"{m.p99_ms:.2f}"] if m else ["-"] * 3),
        _number(row.avg_batch, 2),
        _percent(row.server_cpu),
    ]
    return [*cells, _percent(row.gpu_utilization)] if gpu else cells


def format_rows(rows: Sequence[Row]) -> str:
    header = ["system", "model", "batching", "front end", "N", "conc", "infer/s", "p50 ms"]
    header += ["p99 ms", "avg batch", "server cpu"]
    gpu = any(r.gpu_utilization is not None for r in rows)
    if gpu:
        header.append("gpu util")
    return columns(header, (row_cells(r, gpu) for r in rows))


def format_ceilings(ceilings: Sequence[Ceiling]) -> str:
    return "\n".join(
        f"ceiling {c.model} (one InferenceSession(path), default options): "
        + ", ".join(f"batch {b} {rate:.1f}/s" for b, rate in c.infer_per_s_by_batch.items())
        + f"; best {c.best_infer_per_s:.1f}/s at batch {c.best_batch}"
        for c in ceilings
    )


def format_ratio_lines(lines: Sequence[RatioLine]) -> str:
    header = ["model", "front end", "conc", "N", "infer/s", "/ceiling", "/fastapi"]
    header += ["/N=0", "/grpc.aio", "/triton live", "triton quoted", "/quoted"]
    return columns(
        header,
        (
            [
                x.model,
                x.front_end,
                str(x.concurrency),
                str(x.workers),
                _number(x.infer_per_s),
                _number(x.vs_ceiling, 3),
                _number(x.vs_fastapi, 2),
                _number(x.vs_in_process, 2),
                _number(x.vs_canned, 2),
                _number(x.vs_triton_live, 2),
                x.triton_quoted.text() if x.triton_quoted else "-",
                _number(x.vs_triton_quoted, 2),
            ]
            for x in lines
        ),
    )


def format_scaling(lines: Sequence[ScalingLine]) -> str:
    header = ["model", "front end", "conc", "N", "infer/s", "server cpu", "/N=0", "/(N x N=1)"]
    return columns(
        header,
        (
            [
                x.model,
                x.front_end,
                str(x.concurrency),
                str(x.workers),
                _number(x.infer_per_s),
                _percent(x.server_cpu),
                _number(x.vs_in_process, 2),
                _number(x.efficiency, 2),
            ]
            for x in lines
        ),
    )


def format_check(check: Check) -> str:
    def verdict(value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.2f} {'met' if value >= check.threshold else 'MISSED'}"

    values = ", ".join(f"{label} {verdict(value)}" for label, value in check.values)
    return f"{check.target} >= {check.threshold:g}: {values} {check.note}".rstrip()


def format_report(
    rows: Sequence[Row],
    ceilings: Sequence[Ceiling],
    ratios: Sequence[RatioLine],
    scaling: Sequence[ScalingLine],
    targets: Sequence[Check],
    batching: Mapping[str, float | None],
) -> str:
    """Every table of one run, in the order the bench prints them."""
    parts = [format_rows(rows)]
    if ceilings:
        parts.append(format_ceilings(ceilings))
    parts.append(
        "Convoy's batching variant against every baseline (ratios of infer/s at the same\n"
        "concurrency; fastapi: the faster naive form under wrk; triton quoted: issue 13, its\n"
        "upper figure where it gives a range):\n" + format_ratio_lines(ratios)
    )
    if scaling:
        parts.append(
            "worker scaling (server cpu: the process tree's CPU time / wall time; 100% is one\n"
            "core):\n" + format_scaling(scaling)
        )
    lines = ["batching: " + "; ".join(f"{k} = {_number(v, 2)}" for k, v in batching.items())]
    lines += ["targets:", *("  " + format_check(check) for check in targets)]
    parts.append("\n".join(lines))
    return "\n\n".join(parts)
