"""Drain and rollout figures (docs/operations/draining.md): repeated SIGTERM drains of one server
under load, and repeated runs of the nginx rollout test.

A drain: one `convoy serve` (in process, or with 2 front-end workers) with `simple` and the
`sleepy` Python model; 8 clients send `simple` requests back to back, each on its own connection,
and 4 requests of 1 s of `sleepy` are in flight when SIGTERM comes. Counted: the statuses the
clients got after the signal (only OK and UNAVAILABLE are allowed), whether every slow request was
answered, the exit status, the time from the signal to the exit, and the server's processes
left behind. A rollout: tests/deploy/test_replicas.py's rolling restarts and SIGKILL (three
replicas behind Debian's nginx, clients without retries), its figures as the test prints them.
Exit status 1 if any run breaks a rule.

Usage: python scripts/drain_check.py [--drains 10] [--rollouts 3]
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from scripts import models
from scripts.gen_models import write_simple

ROOT = Path(__file__).resolve().parents[1]
SERVING = re.compile(r"serving gRPC on [\w.]+:(\d+)")
CLIENTS = 8
SLOW = 4  # requests of SLOW_S in flight at the signal
SLOW_S = 1.0
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def child_pids(pid: int) -> set[int]:
    """The processes `pid` started (its direct children, from /proc), from any of its threads
    (the server starts a model's worker from a loading thread); a thread that ends meanwhile is
    skipped."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(child) for child in (task / "children").read_text().split()}
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(repo: Path, log: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    command = [
        sys.executable,
        *("-m", "server", "serve", "--model-repository", str(repo), "--host", "127.0.0.1"),
        *("--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"),
        *("--exit-timeout-secs", "20", "--frontend-workers", str(workers)),
    ]
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = SERVING.search(log.read_text(errors="replace"))
        if found:
            return process, f"127.0.0.1:{found.group(1)}"
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"the server did not start; log:\n{log.read_text(errors='replace')}")


def _hammer(url: str, stop: threading.Event, after: list[bool], outcomes: Counter[str]) -> None:
    client = grpcclient.InferenceServerClient(url, channel_args=OWN_CONNECTION)
    rng = np.random.default_rng()
    try:
        while not stop.is_set():
            a, b = (rng.random((1, 16), dtype=np.float32) for _ in range(2))
            inputs = []
            for name, value in (("INPUT0", a), ("INPUT1", b)):
                tensor = grpcclient.InferInput(name, [1, 16], "FP32")
                tensor.set_data_from_numpy(value)
                inputs.append(tensor)
            try:
                result = client.infer("simple", inputs, client_timeout=10)
                right = np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                outcome = "OK" if right else "WRONG"
            except InferenceServerException as exc:
                outcome = str(exc.status()).removeprefix("StatusCode.")
            if after:
                outcomes[outcome] += 1
    finally:
        client.close()


def _sleepy(url: str) -> bool:
    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput("X", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full((1, 1), SLOW_S, dtype=np.float32))
        answer = client.infer("sleepy", [tensor], client_timeout=30).as_numpy("Y")
        return bool(answer is not None and answer[0, 0] == SLOW_S)
    except InferenceServerException:
        return False
    finally:
        client.close()


def drain(repo: Path, log: Path, workers: int) -> dict[str, Any]:
    """One drain under load; what the clients saw after the signal and how the server left."""
    process, url = _start(repo, log, workers)
    children = child_pids(process.pid)
    stop, after, outcomes = threading.Event(), [], Counter[str]()
    threads = [
        threading.Thread(target=_hammer, args=(url, stop, after, outcomes)) for _ in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    with ThreadPoolExecutor(SLOW) as pool:
        time.sleep(1.0)
        slow = [pool.submit(_sleepy, url) for _ in range(SLOW)]
        time.sleep(0.3)  # in the server's hands
        after.append(True)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        exit_s = time.monotonic() - signalled
        answered = sum(future.result() for future in slow)
    time.sleep(0.2)  # the clients meet the stopped server too
    stop.set()
    for thread in threads:
        thread.join(30)
    left = sorted(pid for pid in children if alive(pid))
    return {
        "exit": code,
        "exit_s": round(exit_s, 2),
        "slow_answered": f"{answered}/{SLOW}",
        "after_signal": dict(outcomes),
        "left_behind": left,
        "ok": code == 0
        and answered == SLOW
        and not left
        and set(outcomes) <= {"OK", "UNAVAILABLE"},
    }


def rollout() -> dict[str, Any]:
    """One run of the nginx rollout and SIGKILL tests; their printed figures."""
    command = [
        sys.executable,
        *("-m", "pytest", "-q", "-s", "-p", "no:cacheprovider"),
        *("tests/deploy/test_replicas.py", "-k", "rolling or killed"),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    text = done.stdout
    marker = text.find("replica figures: ")
    figures: dict[str, Any] = {}
    if marker >= 0:
        figures, _ = json.JSONDecoder().raw_decode(text[marker + len("replica figures: ") :])
    summary = {
        name: figures[name]["totals"]
        for name in ("rollout", "rollout_from_workers")
        if name in figures
    }
    return {
        "passed": done.returncode == 0,
        "totals": summary,
        "steps": {name: figures[name]["steps"] for name in summary},
        "sigkill": figures.get("sigkill"),
        "tail": "" if done.returncode == 0 else text[-3000:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drains", type=int, default=10, help="drains per mode")
    parser.add_argument("--rollouts", type=int, default=3)
    args = parser.parse_args()
    good = True
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder) / "models"
        write_simple(repo)
        models.write_sleepy(repo)
        for workers in (0, 2):
            seen: Counter[str] = Counter()
            for run in range(args.drains):
                result = drain(repo, Path(folder) / f"server-{workers}-{run}.log", workers)
                seen.update(result["after_signal"])
                good &= result["ok"]
                print(f"drain, {workers} front-end workers, run {run + 1}: {json.dumps(result)}")
            print(f"drain, {workers} front-end workers, all runs: {dict(seen)}", flush=True)
    for run in range(args.rollouts):
        result = rollout()
        good &= result["passed"]
        print(f"rollout run {run + 1}: {json.dumps(result)}", flush=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
