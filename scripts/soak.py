"""Soak: mixed traffic against one Convoy server for a while, then what was sent, answered and
failed (by status), and the memory (RSS) of every server process at the start and the end.

Traffic, each kind on its own threads, every answer checked against NumPy: unary gRPC on
`simple`, gRPC streams of several requests (each answered once, matched by id), HTTP/REST, calls
cancelled by a short client deadline, system shared-memory inputs and outputs, and sequences on
the stateful `accumulate` (implicit state) and `accumulate_python` (model.py keeps the state).
Beside it the model is reloaded now and then (explicit model control), the python model's worker
process is killed now and then, and, with `--frontend-workers`, a front-end worker (the server
restarts each). A request caught by a reload or a killed worker may fail with UNAVAILABLE (a
killed model worker: INTERNAL, its batch and the sequences begun on it; a client retries it);
anything else, a wrong or duplicated answer, or a traceback or a task left pending in the
server's log, counts as a fault. Exit status 1 on a fault.

Usage: python scripts/soak.py [--seconds 600] [--frontend-workers 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from scripts.drain_check import child_pids
from scripts.gen_models import write_accumulate, write_accumulate_python, write_simple
from scripts.soak_traffic import KILLED_MODEL_WORKER, TRAFFIC, Tally

SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+).*HTTP on :(\d+)")
ROOT = Path(__file__).resolve().parents[1]


def _workers(pid: int, marker: bytes = b"frontend") -> list[int]:
    """The server's child processes with `marker` in their command line (an argument, or a
    file's name): its front-end workers, or (b"_worker.py") its python models' workers."""
    found = []
    for child in child_pids(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(argument.rsplit(b"/", 1)[-1] == marker for argument in command):
            found.append(child)
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _memory(pid: int) -> dict[str, float]:
    shown = {"core": _rss_mb(pid)}
    for index, worker in enumerate(sorted(_workers(pid))):
        shown[f"worker {index}"] = _rss_mb(worker)
    return shown


@contextlib.contextmanager
def _server(
    repository: Path, workers: int, log: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    command = [
        sys.executable,
        "-m",
        "server",
        "serve",
        "--model-repository",
        str(repository),
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--metrics-port",
        "0",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--frontend-workers",
        str(workers),
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = SERVING.search(log.read_text(errors="replace"))
            if found:
                yield process, f"127.0.0.1:{found.group(1)}", f"127.0.0.1:{found.group(2)}"
                return
            if process.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit(f"the server did not start; its log:\n{log.read_text(errors='replace')}")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def _disturb(
    url: str, process: subprocess.Popen[bytes], workers: int, tally: Tally, stop: threading.Event
) -> Counter[str]:
    """Reload the model every 20 s, kill a python model's worker process every 30 s and a
    front-end worker every 45 s, until stopped."""
    done: Counter[str] = Counter()
    started = time.monotonic()
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        next_reload, next_model_kill, next_kill = started + 20, started + 30, started + 45
        while not stop.wait(1.0):
            now = time.monotonic()
            if now >= next_reload:
                tally.disturb("reload")
                with contextlib.suppress(InferenceServerException):
                    client.load_model("simple")
                    done["reloads"] += 1
                tally.disturb("reload")
                next_reload = now + 20
            if now >= next_model_kill:
                model_workers = _workers(process.pid, b"_worker.py")
                if model_workers:
                    tally.disturb(KILLED_MODEL_WORKER)
                    os.kill(model_workers[int(now) % len(model_workers)], signal.SIGKILL)
                    done["model workers killed"] += 1
                next_model_kill = now + 30
            if workers and now >= next_kill:
                alive = _workers(process.pid)
                if alive:
                    tally.disturb("killed worker")
                    os.kill(alive[0], signal.SIGKILL)
                    done["workers killed"] += 1
                next_kill = now + 45
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--frontend-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per traffic kind")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        repository = Path(scratch) / "models"
        write_simple(repository)
        write_accumulate(repository)
        write_accumulate_python(repository)
        log = Path(scratch) / "server.log"
        with _server(repository, args.frontend_workers, log) as (process, url, http_url):
            tally = Tally()
            stop = threading.Event()
            threads = [
                threading.Thread(target=kind, args=(url, http_url, tally, stop, seed), daemon=True)
                for seed, kind in enumerate(TRAFFIC * args.threads, start=1)
            ]
            for thread in threads:
                thread.start()
            time.sleep(min(10.0, args.seconds / 10))  # warm-up before the first memory reading
            before = _memory(process.pid)
            disturbed: Counter[str] = Counter()
            disturber = threading.Thread(
                target=lambda: disturbed.update(
                    _disturb(url, process, args.frontend_workers, tally, stop)
                ),
                daemon=True,
            )
            disturber.start()
            stop.wait(args.seconds)
            after = _memory(process.pid)
            stop.set()
            for thread in (*threads, disturber):
                thread.join(60)
            alive = process.poll() is None
        # What no disturbance excuses: an error logged with its traceback, a task left pending.
        logged = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("Traceback") or "Task was destroyed" in line
        ]
    print(
        f"soak: {args.seconds:.0f} s, {args.frontend_workers} front-end workers, "
        f"server alive: {alive}"
    )
    print(f"disturbances: {dict(disturbed)}")
    kinds = sorted({kind for kind, _ in tally.counts})
    for kind in kinds:
        outcomes = {outcome: n for (k, outcome), n in sorted(tally.counts.items()) if k == kind}
        print(f"  {kind:10s} sent {sum(outcomes.values()):7d}  {outcomes}")
    print(
        "RSS MB, after warm-up -> end: "
        + ", ".join(
            f"{name} {before.get(name, 0):.0f} -> {after.get(name, 0):.0f}" for name in after
        )
    )
    for fault in tally.faults:
        print(f"FAULT {fault}")
    for line in logged[:20]:
        print(f"FAULT in the server's log: {line}")
    return 1 if tally.faults or logged or not alive else 0


if __name__ == "__main__":
    sys.exit(main())
