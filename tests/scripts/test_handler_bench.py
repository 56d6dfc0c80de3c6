"""scripts/handler_bench.py: the work that matches a p50 is read off the measured curve, and the
in-process figures come from a real session and Convoy's real path."""

from pathlib import Path

import pytest

from scripts import handler_bench
from scripts.hotpath_bench import build_repository

CURVE = [(0, 350.0), (10, 380.0), (50, 575.0), (100, 640.0)]


def test_a_p50_between_two_points_is_interpolated() -> None:
    assert handler_bench.equivalent_work(CURVE, 350.0) == 0
    assert handler_bench.equivalent_work(CURVE, 477.5) == pytest.approx(30.0)
    assert handler_bench.equivalent_work(CURVE, 640.0) == pytest.approx(100.0)


def test_a_p50_outside_the_curve_has_no_equivalent() -> None:
    assert handler_bench.equivalent_work(CURVE, 300.0) is None
    assert handler_bench.equivalent_work(CURVE, 900.0) is None


def test_a_dip_in_a_noisy_curve_is_read_as_measured() -> None:
    noisy = [(0, 350.0), (20, 420.0), (30, 400.0), (40, 500.0)]
    # 410 lies on every stretch; the first one in order of work answers.
    assert handler_bench.equivalent_work(noisy, 410.0) == pytest.approx(20 * 60 / 70)


def test_the_in_process_figures_are_measured(tmp_path: Path) -> None:
    repo = build_repository(tmp_path)
    assert 0 < handler_bench.session_run_us(repo / "mlp_off" / "1" / "model.onnx") < 10_000
    for concurrency, model in handler_bench.LEVELS:
        assert 0 < handler_bench.convoy_path_us(repo, model, concurrency) < 10_000
