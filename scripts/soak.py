"""Soak: mixed traffic against one Convoy server for a while, then what was sent, answered and
failed (by status), and the memory (RSS) of every server process at the start and the end.

Traffic, each kind on its own threads, every answer checked against NumPy: unary gRPC on
`simple`, gRPC streams of several requests (each answered once, matched by id), HTTP/REST, calls
cancelled by a short client deadline, system shared-memory inputs and outputs, and the stateful
`accumulate` model over sequences. Beside it the model is reloaded now and then (explicit model
control) and, with `--frontend-workers`, a worker is killed now and then (the server restarts
it). A request caught by a reload or a killed worker may fail with UNAVAILABLE (a client retries
it); anything else, or a wrong or duplicated answer, counts as a fault. Exit status 1 on a fault.

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

from scripts.gen_models import write_accumulate, write_simple
from scripts.soak_traffic import TRAFFIC, Tally

SERVING = re.compile(r"serving gRPC on [\d.]+:(\d+).*HTTP on :(\d+)")
ROOT = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _workers(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"frontend" in command:
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
    """Reload the model every 20 s and kill a worker every 45 s, until stopped."""
    done: Counter[str] = Counter()
    started = time.monotonic()
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        next_reload, next_kill = started + 20, started + 45
        while not stop.wait(1.0):
            now = time.monotonic()
            if now >= next_reload:
                tally.disturb("reload")
                with contextlib.suppress(InferenceServerException):
                    client.load_model("simple")
                    done["reloads"] += 1
                tally.disturb("reload")
                next_reload = now + 20
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
    return 1 if tally.faults or not alive else 0


if __name__ == "__main__":
    sys.exit(main())
