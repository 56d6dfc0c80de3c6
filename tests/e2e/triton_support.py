"""Servers started by any command line (`tritonserver ...` as a deployment writes it, or `convoy
serve` with the log in a file), waited for through the serving line wherever the log goes, and
probed over HTTP as a kubelet or Prometheus would."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from e2e_support import REPO_ROOT, START_TIMEOUT_S

SERVING = re.compile(
    r"serving (?:gRPC on [\w.:\[\]-]+:(?P<grpc>\d+)|without gRPC)"
    r"(?:, metrics on :(?P<metrics>\d+)/metrics)?(?:, HTTP on :(?P<http>\d+))?"
)


def tritonserver_command() -> list[str]:
    """The `tritonserver` console script of this environment (`pip install -e .` makes it)."""
    script = Path(sys.executable).with_name("tritonserver")
    assert script.is_file(), f"{script} is missing: reinstall the project (pip install -e .)"
    return [str(script)]


def free_ports(count: int) -> list[int]:
    """Ports free now (held open together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]
    finally:
        for held in sockets:
            held.close()


class Started:
    """One server process; `log` is where its log lines go (stderr's file, or --log-file)."""

    def __init__(
        self,
        command: Sequence[str],
        stderr_path: Path,
        log: Path | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.command = list(command)
        self.stderr_path = stderr_path
        self.log_path = log or stderr_path
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                self.command,
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=None if environment is None else dict(environment),
            )
        self.grpc_port = self.http_port = self.metrics_port = 0

    def log(self) -> str:
        text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        if self.log_path != self.stderr_path and self.log_path.exists():
            text += self.log_path.read_text(encoding="utf-8", errors="replace")
        return text

    def wait_serving(self, timeout_s: float = START_TIMEOUT_S) -> Started:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = SERVING.search(self.log())
            if found:
                self.grpc_port = int(found["grpc"] or 0)
                self.metrics_port = int(found["metrics"] or 0)
                self.http_port = int(found["http"] or 0)
                return self
            if self.process.poll() is not None:
                pytest.fail(f"exited with {self.process.returncode}; log:\n{self.log()}")
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"no serving line within {timeout_s} s; log:\n{self.log()}")

    def exit_code(self, timeout_s: float = 30.0) -> int:
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def http_status(url: str) -> int:
    """The status of a GET (the server's error statuses included)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode("utf-8"))


class CountingProxy:
    """A TCP proxy on 127.0.0.1 to `port` that counts the bytes the server sends back (to see
    whether responses travel compressed); one thread per direction and connection."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.from_server = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if counted:
                    with self._lock:
                        self.from_server += len(chunk)
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._listener.close()
