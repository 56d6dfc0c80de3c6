"""server.contract.scheduling: the event loop's thread stays under SCHED_OTHER while every other
thread of the process goes under SCHED_BATCH, now and at the next sweep for threads started
since; the switch and a process started under another policy leave every thread as it is. Each
case runs in a process of its own, so that the test runner's threads keep their policies."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from server.contract.scheduling import SWITCH

PROBE = """
import json
import os
import sys
import threading

from server.contract.scheduling import LoopFirst

if sys.argv[1] == "batch":  # started under SCHED_BATCH, as `chrt -b` starts a process
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
stop = threading.Event()


def helper():
    thread = threading.Thread(target=stop.wait)
    thread.start()
    return thread


def policy(thread):
    return os.sched_getscheduler(thread.native_id if thread is not None else 0)


before = helper()
first = LoopFirst.begin(os.environ)
after = helper()  # started by the loop's thread: inherits its policy until a sweep
seen = {"begun": first is not None, "loop": policy(None), "before": policy(before)}
seen["after"] = policy(after)
seen["swept"] = first.sweep() if first is not None else 0
seen["after_sweep"] = policy(after)
stop.set()
print(json.dumps(seen))
"""


def _probe(start: str, environ: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, start],
        env=environ,
        capture_output=True,
        check=True,
        text=True,
    )
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


def _environment(**extra: str) -> dict[str, str]:
    environ = {key: value for key, value in os.environ.items() if key != SWITCH}
    return environ | extra


pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's policies only")


def test_every_thread_but_the_loops_goes_behind_it() -> None:
    seen = _probe("other", _environment())
    assert seen["begun"] is True
    assert seen["loop"] == os.SCHED_OTHER and seen["before"] == os.SCHED_BATCH
    assert seen["after"] == os.SCHED_OTHER  # until the sweep
    assert seen["swept"] == 1 and seen["after_sweep"] == os.SCHED_BATCH


@pytest.mark.parametrize(
    ("start", "environ"),
    [("other", _environment(**{SWITCH: "0"})), ("batch", _environment())],
    ids=["switched off", "started under SCHED_BATCH"],
)
def test_the_switch_and_the_environments_own_policy_leave_every_thread(
    start: str, environ: dict[str, str]
) -> None:
    seen = _probe(start, environ)
    started = os.SCHED_BATCH if start == "batch" else os.SCHED_OTHER
    assert seen["begun"] is False and seen["swept"] == 0
    assert seen["loop"] == seen["before"] == seen["after_sweep"] == started
