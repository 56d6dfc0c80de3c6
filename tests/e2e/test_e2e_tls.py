"""TLS on gRPC (Triton's --grpc-use-ssl, --grpc-use-ssl-mutual): the server presents its
certificate; in mutual mode a client without a certificate signed by the root is refused. The
tests make their own certificate authorities; they run in process and with front-end workers."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from e2e_support import ConvoyServer, StartServer, simple_inputs
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from scripts import models


@dataclass(frozen=True)
class Pem:
    """A certificate and its key, written as PEM files."""

    cert: Path
    key: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(
    folder: Path,
    stem: str,
    subject: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    server: bool = False,
) -> tuple[Pem, x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for `subject`, signed by `issuer` (None: self-signed, a CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    signer_cert, signer_key = issuer if issuer is not None else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(signer_cert.subject if signer_cert is not None else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    pem = Pem(folder / f"{stem}.pem", folder / f"{stem}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem, cert, key


@dataclass(frozen=True)
class Certificates:
    ca: Pem
    server: Pem
    client: Pem  # signed by `ca`
    stranger: Pem  # signed by another CA


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    folder = tmp_path_factory.mktemp("tls")
    ca, ca_cert, ca_key = _issue(folder, "ca", "Convoy test CA", None)
    server, _, _ = _issue(folder, "server", "localhost", (ca_cert, ca_key), server=True)
    client, _, _ = _issue(folder, "client", "client", (ca_cert, ca_key))
    _, other_cert, other_key = _issue(folder, "other-ca", "Another CA", None)
    stranger, _, _ = _issue(folder, "stranger", "stranger", (other_cert, other_key))
    return Certificates(ca, server, client, stranger)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    models.write_model(repo, "simple", models.simple(TensorProto.FLOAT), None)
    return repo


@contextlib.contextmanager
def tls_client(
    server: ConvoyServer, ca: Pem, identity: Pem | None = None
) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(
        server.url,
        ssl=True,
        root_certificates=str(ca.cert),
        private_key=str(identity.key) if identity else None,
        certificate_chain=str(identity.cert) if identity else None,
    )
    with contextlib.closing(client):
        yield client


def _infers(client: grpcclient.InferenceServerClient) -> None:
    inputs, a, b = simple_inputs(1)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)


def _refused(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as refused:
        client.is_server_live(client_timeout=10)
    assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value


def _tls_flags(certificates: Certificates, *extra: str) -> tuple[str, ...]:
    return (
        f"--grpc-server-cert={certificates.server.cert}",
        f"--grpc-server-key={certificates.server.key}",
        *extra,
    )


def test_the_server_presents_its_certificate(
    start_server: StartServer, repository: Path, certificates: Certificates
) -> None:
    server = start_server(repository, "--grpc-use-ssl=true", *_tls_flags(certificates))
    with tls_client(server, certificates.ca) as client:
        assert client.is_server_ready()
        _infers(client)
    with contextlib.closing(grpcclient.InferenceServerClient(server.url)) as plaintext:
        _refused(plaintext)  # the port speaks TLS only
    # A client that trusts another root does not accept the server's certificate.
    with tls_client(server, certificates.stranger) as distrustful:
        _refused(distrustful)


def test_mutual_tls_refuses_a_client_without_a_certificate_signed_by_the_root(
    start_server: StartServer, repository: Path, certificates: Certificates
) -> None:
    server = start_server(
        repository,
        "--grpc-use-ssl-mutual=true",
        *_tls_flags(certificates, f"--grpc-root-cert={certificates.ca.cert}"),
    )
    with tls_client(server, certificates.ca, certificates.client) as client:
        _infers(client)
    with tls_client(server, certificates.ca) as anonymous:
        _refused(anonymous)
    with tls_client(server, certificates.ca, certificates.stranger) as stranger:
        _refused(stranger)
    with tls_client(server, certificates.ca, certificates.client) as again:
        _infers(again)  # refusals cost nothing to the clients that are let in
