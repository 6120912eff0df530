"""A private CA, a server certificate for 127.0.0.1 and client certificates, made with openssl,
for TLS tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_certificates(directory: Path) -> Certificates:
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=hookbridge test CA",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(csr))
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(directory / "san.ext"),
        "-out",
        str(cert),
    )
    return Certificates(ca, cert, key)


def make_client_certificate(directory: Path, ca: Certificates, common_name: str) -> tuple[Path, Path]:
    """(certificate, key) of a client certificate with `common_name`, signed by `ca`'s CA."""
    stem = "".join(c if c.isalnum() else "_" for c in common_name)
    key, csr, cert = (directory / f"client-{stem}.{ext}" for ext in ("key", "csr", "pem"))
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}", "-keyout", str(key), "-out", str(csr)
    )
    ca_key = ca.ca.with_name("ca.key")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.ca), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2",
        "-out", str(cert),
    )  # fmt: skip
    return cert, key
