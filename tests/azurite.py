"""An Azure Blob Storage stand-in for the tests: Azurite (Microsoft's emulator, from npm: `npm
install -g azurite`) in its own process on 127.0.0.1, in memory, checking shared-key signatures
with its published development account."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.moto_server import free_port

START_TIMEOUT_S = 30.0
ACCOUNT = "devstoreaccount1"  # Azurite's development account and its published key
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_binary() -> str | None:
    return shutil.which("azurite-blob")


class Azurite:
    """`azurite-blob` on a free port."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Azurite:
        binary = azurite_binary()
        assert binary is not None, "azurite-blob is not installed (npm install -g azurite)"
        self.port = free_port()
        workspace = self.log_path.with_name("azurite")
        workspace.mkdir(exist_ok=True)
        command = [binary, "--blobHost", "127.0.0.1", "--blobPort", str(self.port)]
        command += ["--inMemoryPersistence", "--skipApiVersionCheck", "--loose"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=workspace, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Azurite did not start; log:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def connection_string(self, key: str = KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def env(self) -> dict[str, str]:
        """What a Convoy process reads to reach this emulator."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string())

    def upload(self, directory: Path, container: str, prefix: str) -> None:
        """Every file below `directory` as `prefix/<relative path>` (the container must exist)."""
        target = self.client().get_container_client(container)
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                target.upload_blob(
                    f"{prefix}/{path.relative_to(directory)}", path.read_bytes(), overwrite=True
                )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
