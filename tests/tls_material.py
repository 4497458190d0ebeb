"""Certificates for tests that speak TLS for real: a CA and the leaf certificates it signs.

Used for the API server of the e2e control plane and for ``redis-server --tls-port``. Keys are
EC P-256, certificates live a day; every file is PEM, keys 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Authority:
    """A CA: its certificate and the key that signs leaves."""

    name: x509.Name
    cert: x509.Certificate
    key: Any


@dataclass(frozen=True)
class LeafFiles:
    """A leaf certificate and key on disk, with the CA certificate that verifies it."""

    ca_cert: Path
    cert: Path
    key: Path

    def read(self) -> dict[str, bytes]:
        """As a Kubernetes TLS Secret holds them (``ca.crt``, ``tls.crt``, ``tls.key``)."""
        return {
            "ca.crt": self.ca_cert.read_bytes(),
            "tls.crt": self.cert.read_bytes(),
            "tls.key": self.key.read_bytes(),
        }


def pem_key(key: Any) -> bytes:
    data: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return data


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _usage(*, sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign,
        crl_sign=sign,
        encipher_only=False,
        decipher_only=False,
    )


def _window(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return builder.not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(
        now + dt.timedelta(days=1)
    )


def make_authority(common_name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _window(x509.CertificateBuilder())
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Authority(name=name, cert=cert, key=key)


def issue_leaf(
    ca: Authority,
    common_name: str,
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    client: bool = True,
) -> tuple[x509.Certificate, Any]:
    """A certificate for a server (and, with ``client``, for the same party as a client)."""
    key = ec.generate_private_key(ec.SECP256R1())
    uses = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (
        _window(x509.CertificateBuilder())
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(uses), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False
        )
    )
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca.key, hashes.SHA256()), key


def write_leaf(
    folder: Path,
    ca: Authority,
    common_name: str,
    *,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
) -> LeafFiles:
    """The CA certificate and a leaf it signs, written into ``folder`` as a TLS Secret's keys."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = issue_leaf(ca, common_name, dns=dns, ips=ips)
    files = LeafFiles(ca_cert=folder / "ca.crt", cert=folder / "tls.crt", key=folder / "tls.key")
    files.ca_cert.write_bytes(pem_cert(ca.cert))
    files.cert.write_bytes(pem_cert(cert))
    files.key.write_bytes(pem_key(key))
    files.key.chmod(0o600)
    return files
