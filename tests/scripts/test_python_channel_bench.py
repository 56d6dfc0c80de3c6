"""scripts/python_channel_bench.py: one short run of every case, ring and socket, three requests
a batch."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "python_channel_bench.py"


def test_a_short_run_prints_both_ways_and_their_ratio() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--sizes-kib",
            "4,64",
            "--requests",
            "3",
            "--seconds",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    for where in ("any core", "one core"):
        assert any(re.search(rf"two processes, {where}: .* CPU [0-9.]+ us", line) for line in lines)
    for way in ("ring", "socket"):
        assert sum(bool(re.search(rf"KiB +{way} +[0-9]", line)) for line in lines) == 2
    assert sum(bool(re.search(r"socket / ring: .* CPU [0-9.]+x", line)) for line in lines) == 2
    assert (
        sum(
            bool(re.search(r"worker's side in one process, warm: [0-9,]+ us", line))
            for line in lines
        )
        == 2
    )
