"""Self-signed certificates for the TLS tests, made by the ``openssl`` command (the
``cryptography`` package is not a dependency), and the fixture that gives one."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class CertFiles:
    """A certificate for 127.0.0.1 (and ``localhost``) and its private key, PEM files."""

    cert: str
    key: str


def make_certificate(directory: Path, name: str = "server") -> CertFiles:
    """A new self-signed certificate in ``directory``; skips the test without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return CertFiles(str(cert), str(key))
