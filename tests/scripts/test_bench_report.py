"""The benchmark's ratio, worker-scaling and target tables, from hand-made rows."""

from __future__ import annotations

import pytest

from scripts.bench_report import (
    batching_ratios,
    checks,
    format_check,
    format_report,
    format_rows,
    ratio_lines,
    scaling_lines,
)
from scripts.bench_results import (
    CANNED,
    CONVOY,
    FASTAPI,
    TRITON,
    Ceiling,
    Lookup,
    Measurement,
    Row,
)


def _row(system: str, model: str, batching: str, front_end: str, workers: int | None, c: int,
         rate: float | None, cpu: float | None = None) -> Row:  # fmt: skip
    measured = Measurement(rate, 1.0, 2.0) if rate is not None else None
    return Row(
        system=system,
        model=model,
        batching=batching,
        front_end=front_end,
        workers=workers,
        concurrency=c,
        measured=measured,
        server_cpu=cpu,
    )


ROWS = [
    _row(CONVOY, "mlp", "on", "grpc", 0, 32, 2800.0, 1.0),
    _row(CONVOY, "mlp", "on", "grpc", 1, 32, 3500.0, 1.5),
    _row(CONVOY, "mlp", "on", "grpc", 2, 32, 6300.0, 1.9),
    _row(CONVOY, "mlp", "off", "grpc", 0, 32, 1400.0),
    _row(CONVOY, "mlp", "on", "stream", 0, 8, 5000.0),
    _row(CONVOY, "mlp", "on", "stream", 1, 8, None),  # a failed measurement
    _row(CANNED, "mlp", "none", "grpc", None, 32, 3200.0),
    _row(TRITON, "mlp", "on", "grpc", None, 32, 2000.0),
    _row(CONVOY, "resnet18", "on", "grpc", 0, 8, 45.0),
    _row(FASTAPI, "resnet18", "async", "http-wrk", None, 8, 30.0),
    _row(FASTAPI, "resnet18", "def", "http-wrk", None, 8, 40.0),
]
CEILINGS = [Ceiling("resnet18", {1: 44.0, 16: 48.0, 32: 47.0})]


def test_ceiling_is_the_best_batch_size() -> None:
    assert (CEILINGS[0].best_batch, CEILINGS[0].best_infer_per_s) == (16, 48.0)


def test_ratio_lines_divide_by_the_baseline_at_the_same_concurrency() -> None:
    lines = {
        (x.model, x.front_end, x.concurrency, x.workers): x
        for x in ratio_lines(Lookup(ROWS, CEILINGS))
    }
    one = lines[("mlp", "grpc", 32, 1)]
    assert one.vs_in_process == pytest.approx(3500 / 2800)
    assert one.vs_canned == pytest.approx(3500 / 3200)
    assert one.vs_triton_live == pytest.approx(3500 / 2000)
    assert one.triton_quoted is not None and one.triton_quoted.text() == "6500-7200"
    assert one.vs_triton_quoted == pytest.approx(3500 / 7200)  # the range's upper figure
    assert one.vs_ceiling is None and one.vs_fastapi is None  # neither was measured for mlp
    resnet = lines[("resnet18", "grpc", 8, 0)]
    assert resnet.triton_quoted is not None and resnet.triton_quoted.text() == "48.3"
    assert resnet.vs_ceiling == pytest.approx(45 / 48)
    assert resnet.vs_fastapi == pytest.approx(45 / 40)  # the faster of the two forms
    assert lines[("mlp", "stream", 8, 1)].infer_per_s is None
    assert ("mlp", "grpc", 32, None) not in lines  # only Convoy's `on` rows


def test_scaling_is_per_worker_against_n_times_one_worker() -> None:
    lines = [x for x in scaling_lines(Lookup(ROWS, CEILINGS)) if x.front_end == "grpc"]
    assert [(x.workers, x.server_cpu) for x in lines] == [(0, 1.0), (1, 1.5), (2, 1.9)]
    assert lines[0].efficiency is None
    assert lines[1].efficiency == pytest.approx(1.0)
    assert lines[2].efficiency == pytest.approx(6300 / (2 * 3500))
    assert lines[2].vs_in_process == pytest.approx(6300 / 2800)


def test_checks_cover_what_was_measured_and_judge_each_worker_count() -> None:
    found = {c.target: c for c in checks(Lookup(ROWS, CEILINGS), cores=2)}
    with_workers = found["mlp grpc @32 with workers / in-process"]
    assert with_workers.values == (("N=1", 3500 / 2800), ("N=2", 6300 / 2800))
    assert format_check(with_workers) == (
        "mlp grpc @32 with workers / in-process >= 1.2: N=1 1.25 met, N=2 2.25 met"
    )
    canned = found["mlp grpc @32 in-process / bare grpc.aio"]
    assert format_check(canned) == "mlp grpc @32 in-process / bare grpc.aio >= 0.85: N=0 0.88 met"
    stream = found["mlp stream @8 / Triton 2.51 quoted 5500"]
    assert format_check(stream).endswith(">= 1: N=0 0.91 MISSED, N=1 -, N=2 -")
    resnet = found["resnet18 grpc @8 / ceiling"]
    assert resnet.values[0] == ("N=0", 45 / 48)
    scaling = found["mlp grpc @32 N workers / (N x one worker)"]
    assert format_check(scaling).endswith(
        ">= 0.7: N=2 0.90 met (a target on >= 8 cores; this machine has 2)"
    )
    # Nothing ran over HTTP or at concurrency 1: no target for them.
    assert not [t for t in found if " http " in t or "@1 " in t]


def test_batching_ratios_and_report_text() -> None:
    look = Lookup(ROWS, CEILINGS)
    assert batching_ratios(look)["mlp on/off @32"] == pytest.approx(2.0)
    waited = Lookup([*ROWS, _row(CONVOY, "mlp", "wait", "grpc", 0, 32, 1400.0)], CEILINGS)
    ratios = batching_ratios(waited)
    assert ratios["mlp on/wait infer/s @32"] == pytest.approx(2.0)
    assert ratios["mlp on/wait infer/s @8"] is None  # not measured at 8
    text = format_report(
        ROWS, CEILINGS, ratio_lines(look), scaling_lines(look), checks(look, 2), {"x": None}
    )
    assert "best 48.0/s at batch 16" in text and "batching: x = -" in text
    table = format_rows(ROWS).splitlines()
    assert table[0].split()[:3] == ["system", "model", "batching"]
    failed = next(
        line for line in table if line.split()[:5] == ["convoy", "mlp", "on", "stream", "1"]
    )
    assert failed.split()[6:] == ["-"] * 5
