"""server.contract.allocator: the thresholds are added to the environment's own tunables, never
over the environment's own thresholds, and set in a process that asks for them."""

from __future__ import annotations

import subprocess
import sys

from server.contract.allocator import (
    MMAP_THRESHOLD_BYTES,
    TRIM_THRESHOLD_BYTES,
    TUNABLES,
    tunables,
)

OURS = (
    f"glibc.malloc.mmap_threshold={MMAP_THRESHOLD_BYTES}:"
    f"glibc.malloc.trim_threshold={TRIM_THRESHOLD_BYTES}"
)


def test_an_empty_environment_gets_both_thresholds() -> None:
    assert tunables({}) == OURS
    assert tunables({TUNABLES: ""}) == OURS


def test_the_environments_other_tunables_are_kept() -> None:
    held = "glibc.malloc.arena_max=2:glibc.cpu.hwcaps=-AVX512F"
    assert tunables({TUNABLES: held}) == f"{held}:{OURS}"


def test_the_environments_own_thresholds_rule() -> None:
    for held in (
        "glibc.malloc.mmap_threshold=131072",
        "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=0",
        " glibc.malloc.trim_threshold = 4096",
    ):
        assert tunables({TUNABLES: held}) is None
    assert tunables({"MALLOC_TRIM_THRESHOLD_": "131072"}) is None
    assert tunables({"MALLOC_MMAP_THRESHOLD_": "131072"}) is None


# Eight 1 MiB arrays allocated together and freed, twenty times: the page faults of the last
# nineteen rounds, after `keep_large_buffers` or without it.
PROBE = """
import resource
import sys

import numpy as np

from server.contract.allocator import TUNABLES, keep_large_buffers


def rounds(count):
    for _ in range(count):
        held = [np.ones(1 << 20, np.uint8) for _ in range(8)]  # every page written
        del held


environ = {}
kept = keep_large_buffers(environ) if sys.argv[1] == "keep" else False
rounds(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(19)
print(kept, TUNABLES in environ, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(mode: str) -> tuple[str, str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    kept, passed_on, faults = done.stdout.split()
    return kept, passed_on, int(faults)


def test_a_process_that_keeps_large_buffers_stops_faulting_them_in() -> None:
    pages = 8 * 256
    kept, passed_on, faults = _probe("keep")
    assert (kept, passed_on) == ("True", "True")
    assert faults < pages  # not one round's worth in nineteen
    kept, passed_on, faults = _probe("default")
    assert (kept, passed_on) == ("False", "False")
    assert faults > 10 * pages  # glibc's defaults: the pages of nearly every round
