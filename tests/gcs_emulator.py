"""A Google Cloud Storage stand-in for the tests: gcp-storage-emulator (the JSON API, in memory)
in its own process on 127.0.0.1. It checks no credentials: clients reach it anonymously. And a
token endpoint on 127.0.0.1 that refuses every grant, for the credentials' errors."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.moto_server import free_port

START_TIMEOUT_S = 30.0


class GcsEmulator:
    """`python -m gcp_storage_emulator start` on a free port."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GcsEmulator:
        self.port = free_port()
        command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*command, "--port", str(self.port), "--in-memory"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the emulator did not start; log:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=1).close()
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    def env(self) -> dict[str, str]:
        """What a Convoy process reads to use this emulator (Google's libraries' variable)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def create_bucket(self, bucket: str) -> None:
        body = json.dumps({"name": bucket}).encode()
        self._call("POST", "/storage/v1/b?project=convoy", body, "application/json")

    def put(self, bucket: str, name: str, data: bytes) -> None:
        """Write one object (a new generation when it exists)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        self._call("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data)

    def delete(self, bucket: str, name: str) -> None:
        self._call("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")

    def upload(self, directory: Path, bucket: str, prefix: str) -> None:
        """Every file below `directory` as `prefix/<relative path>` (the bucket must exist)."""
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                self.put(bucket, f"{prefix}/{path.relative_to(directory)}", path.read_bytes())

    def _call(
        self, method: str, path: str, body: bytes | None = None, content_type: str = ""
    ) -> None:
        """One JSON API request of the test's own (plain HTTP: not the client under test)."""
        request = urllib.request.Request(self.endpoint + path, data=body, method=method)
        request.add_header("Content-Type", content_type or "application/octet-stream")
        urllib.request.urlopen(request, timeout=10).close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": "invalid_grant", "error_description": "Bad Request"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: pytest shows failures
        pass


@contextlib.contextmanager
def refusing_token_endpoint() -> Iterator[str]:
    """The URL of a stand-in for Google's OAuth token endpoint on 127.0.0.1 that answers every
    grant as Google answers a revoked refresh token (400 invalid_grant)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
