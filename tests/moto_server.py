"""A real S3-compatible server for the tests: moto's standalone server in its own process on
127.0.0.1, with IAM authentication on (a wrong key is refused, as by AWS)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3

START_TIMEOUT_S = 30.0
REGION = "us-east-1"
# Everything the tests' clients and servers need beside the keys; no instance metadata probes.
BASE_ENV = {"AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class MotoServer:
    """`python -m moto.server` on a free port; `start()` makes an IAM user whose keys the
    tests use, then turns authentication on. With `tls`, it serves HTTPS with a certificate for
    127.0.0.1 that `ca_bundle` holds."""

    def __init__(self, log_path: Path, tls: bool = False) -> None:
        self.log_path = log_path
        self.ca_bundle = log_path.with_name("moto-cert.pem") if tls else None
        self.port = 0
        self.key_id = ""
        self.secret_key = ""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.ca_bundle else 'http'}://127.0.0.1:{self.port}"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        self.port = free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        if self.ca_bundle is not None:
            key = self.ca_bundle.with_suffix(".key")
            _self_signed(self.ca_bundle, key)
            command += ["-c", str(self.ca_bundle), "-k", str(key)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto did not start; log:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        try:
            iam = self.client("iam", "bootstrap", "bootstrap")  # any key while auth is off
            iam.create_user(UserName="convoy")
            policy = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
            }
            iam.put_user_policy(
                UserName="convoy", PolicyName="all", PolicyDocument=json.dumps(policy)
            )
            key = iam.create_access_key(UserName="convoy")["AccessKey"]
            self.key_id, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
            request = urllib.request.Request(
                f"{self.endpoint}/moto-api/reset-auth",
                data=b"0",
                headers={"Content-Type": "text/plain"},
            )
            # From now on, every request must be signed with a key of this server's IAM.
            urllib.request.urlopen(request, timeout=5, context=self._tls()).close()
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(
                f"{self.endpoint}/moto-api/data.json", timeout=1, context=self._tls()
            ).close()
        except (urllib.error.URLError, ConnectionError):
            return False
        return True

    def _tls(self) -> ssl.SSLContext | None:
        return None if self.ca_bundle is None else ssl.create_default_context(cafile=self.ca_bundle)

    def client(self, service: str = "s3", key_id: str = "", secret_key: str = "") -> Any:
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            verify=None if self.ca_bundle is None else str(self.ca_bundle),
            aws_access_key_id=key_id or self.key_id,
            aws_secret_access_key=secret_key or self.secret_key,
        )

    def env(self) -> dict[str, str]:
        """The variables a Convoy process reads to reach this server with the good keys."""
        env = {
            **BASE_ENV,
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }
        if self.ca_bundle is not None:
            env["AWS_CA_BUNDLE"] = str(self.ca_bundle)  # boto3 trusts the test's certificate
        return env

    def upload(self, directory: Path, bucket: str, prefix: str) -> None:
        """Every file below `directory` as `prefix/<relative path>` (the bucket must exist)."""
        s3 = self.client()
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(directory)}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _self_signed(cert_path: Path, key_path: Path) -> None:
    """A certificate for 127.0.0.1, valid for a day, signed by its own key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
