"""A Google Cloud Storage stand-in for the tests: gcp-storage-emulator (the JSON API, in memory)
in its own process on 127.0.0.1. It checks no credentials: clients reach it anonymously."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

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
        """What a Convoy process reads to use this emulator (google-cloud-storage's variable)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="convoy",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    def upload(self, directory: Path, bucket: str, prefix: str) -> None:
        """Every file below `directory` as `prefix/<relative path>` (the bucket must exist)."""
        target = self.client().bucket(bucket)
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                target.blob(f"{prefix}/{path.relative_to(directory)}").upload_from_filename(
                    str(path)
                )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
