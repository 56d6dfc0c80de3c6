"""The benchmark's server CPU meter: a process tree's CPU time from /proc/<pid>/stat."""

from __future__ import annotations

import subprocess
import sys

from scripts.bench_drivers import CpuMeter, process_tree, tree_cpu_ticks


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, cutime: int = 0,
          cstime: int = 0) -> str:  # fmt: skip
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime ...
    return f"{pid} ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 1"


def test_tree_sums_the_root_its_descendants_and_what_they_reaped() -> None:
    stats = {
        1: _stat(1, "init", 0, 1000, 1000),
        10: _stat(10, "python -m server", 1, 30, 5, cutime=7, cstime=1),
        11: _stat(11, "worker (1)", 10, 20, 2),
        12: _stat(12, "grand) child", 11, 4, 0),  # a ")" inside the name
        20: _stat(20, "other", 1, 500, 500),
    }
    assert tree_cpu_ticks(stats, 10) == 30 + 5 + 7 + 1 + 20 + 2 + 4
    assert tree_cpu_ticks(stats, 12) == 4
    assert tree_cpu_ticks(stats, 99) == 0  # gone


def test_a_process_tree_is_the_root_and_its_descendants() -> None:
    stats = {
        1: _stat(1, "init", 0, 1, 1),
        10: _stat(10, "python -m server", 1, 1, 1),
        11: _stat(11, "worker (1)", 10, 1, 1),
        12: _stat(12, "grand) child", 11, 1, 1),
        20: _stat(20, "other", 1, 1, 1),
    }
    assert sorted(process_tree(stats, 10)) == [10, 11, 12]
    assert process_tree(stats, 99) == []  # gone


def test_meter_counts_a_reaped_grandchild() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = (
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {burn!r}])\n"
        "print('done', flush=True)\n"
        "time.sleep(30)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "done\n"
        assert CpuMeter(process.pid).seconds() >= 0.3
    finally:
        process.kill()
        process.wait()
