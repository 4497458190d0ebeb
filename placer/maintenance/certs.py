"""The serving certificate of the guard's admission webhook, made and kept by the binder itself:
no cert-manager and no manual step.

The API server calls the webhook through its Service (``<service>.<namespace>.svc``) over HTTPS,
and trusts the certificate authority that the ValidatingWebhookConfiguration carries in each
webhook's ``clientConfig.caBundle``. At start the binder reads the Secret that holds the material
(``ca.crt``, ``tls.crt``, ``tls.key``); when it is missing, unreadable, within 30 days of its end,
or not made for the Service's names, it makes a new certificate authority (10 years) and a serving
certificate (1 year) and writes them there. Both binder replicas may start at once: the Secret is
created once (the second creator reads the first one's), and replaced only as it was read
(resourceVersion), so the replicas end up serving one certificate. The bundle then also keeps the
previous authority while it is valid, so a replica still serving the previous certificate is
trusted until it reads the new one. Last, every webhook of the configuration is given that bundle;
a configuration that is not installed is logged and left alone.
"""

import base64
import binascii
import datetime
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from placer.kube.adapter import KubeAdapter, KubeApiError

log = logging.getLogger(__name__)

CA_LIFETIME = datetime.timedelta(days=3650)
SERVING_LIFETIME = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
CLOCK_SKEW = datetime.timedelta(minutes=5)
"""Certificates start this long before they are made: a clock a little behind still accepts them."""
SECRET_TYPE = "kubernetes.io/tls"
CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"
CERT_FILE, KEY_FILE = "tls.crt", "tls.key"
LABELS = {
    "app.kubernetes.io/name": "redis-placer",
    "app.kubernetes.io/component": "guard",
    "app.kubernetes.io/part-of": "redis-placer",
}
ATTEMPTS = 5  # reads and writes of the Secret before giving up (each lost race is read again)


class ServingMaterialError(RuntimeError):
    """The serving certificate could be neither read nor written."""


@dataclass(frozen=True)
class ServingMaterial:
    """What the HTTPS server loads, and what the API server must trust."""

    cert_file: str
    """The serving certificate (PEM), mode 0600."""
    key_file: str
    """Its private key (PEM), mode 0600."""
    ca_pem: bytes
    """The certificate authorities (PEM; the one that signed the certificate first): the
    webhook configuration's ``caBundle``."""


@dataclass(frozen=True)
class _Material:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def data(self) -> dict[str, bytes]:
        return {CA_KEY: self.ca_pem, CERT_KEY: self.cert_pem, KEY_KEY: self.key_pem}


def service_names(service_name: str, namespace: str) -> tuple[str, ...]:
    """The names the Service is called by, from the cluster's own name outwards."""
    return (
        f"{service_name}.{namespace}.svc",
        f"{service_name}.{namespace}.svc.cluster.local",
        f"{service_name}.{namespace}",
        service_name,
    )


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_usage(*allowed: str) -> x509.KeyUsage:
    """A KeyUsage extension allowing ``allowed`` (its argument names) and nothing else."""
    usages = (
        "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
        "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
    )  # fmt: skip
    return x509.KeyUsage(**{usage: usage in allowed for usage in usages})


def generate(
    names: tuple[str, ...],
    now: datetime.datetime,
    previous_ca: x509.Certificate | None = None,
) -> _Material:
    """A new certificate authority and a serving certificate for ``names`` (the first is its
    common name), both ECDSA P-256; ``previous_ca`` stays in the bundle, after the new one."""
    start = now - CLOCK_SKEW
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"redis-placer webhook CA {now:%Y-%m-%d}")]
    )
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage("key_cert_sign", "crl_sign"), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + SERVING_LIFETIME)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage("digital_signature"), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    bundle = _pem(ca)
    if previous_ca is not None and previous_ca.not_valid_after_utc > now:
        bundle += _pem(previous_ca)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return _Material(bundle, _pem(cert), key_pem)


def _decoded(secret: Mapping[str, Any]) -> dict[str, bytes]:
    data = secret.get("data") or {}
    try:
        return {str(k): base64.b64decode(v, validate=True) for k, v in data.items()}
    except (binascii.Error, TypeError, ValueError):
        return {}


def check(
    data: Mapping[str, bytes], names: tuple[str, ...], now: datetime.datetime
) -> tuple[_Material | None, str]:
    """The material in ``data`` if it can serve ``names`` for more than RENEW_BEFORE, else None
    and why not."""
    try:
        ca_pem, cert_pem, key_pem = data[CA_KEY], data[CERT_KEY], data[KEY_KEY]
    except KeyError as absent:
        return None, f"it has no {absent.args[0]}"
    try:
        authorities = x509.load_pem_x509_certificates(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError as exc:
        return None, f"it cannot be read: {exc}"
    ca = authorities[0]
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return None, f"its {CERT_KEY} is not signed by the first authority of its {CA_KEY}"
    if key.public_key() != cert.public_key():
        return None, f"its {KEY_KEY} is not the key of its {CERT_KEY}"
    for what, which in ((CA_KEY, ca), (CERT_KEY, cert)):
        if which.not_valid_before_utc > now:
            return None, f"its {what} is not valid before {which.not_valid_before_utc:%Y-%m-%d}"
        if which.not_valid_after_utc - now <= RENEW_BEFORE:
            return None, f"its {what} ends {which.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None, f"its {CERT_KEY} names no host"
    uncovered = [n for n in names if n not in san.get_values_for_type(x509.DNSName)]
    if uncovered:
        return None, f"its {CERT_KEY} is not made for {', '.join(uncovered)}"
    return _Material(ca_pem, cert_pem, key_pem), ""


def _first_authority(data: Mapping[str, bytes]) -> x509.Certificate | None:
    try:
        return x509.load_pem_x509_certificates(data[CA_KEY])[0]
    except (KeyError, ValueError, IndexError):
        return None


def _settle_secret(
    adapter: KubeAdapter,
    namespace: str,
    secret_name: str,
    names: tuple[str, ...],
    now: datetime.datetime,
) -> _Material:
    """The material in the Secret, made (or renewed) first if it cannot serve."""
    where = f"secret {namespace}/{secret_name}"
    for _ in range(ATTEMPTS):
        try:
            found = adapter.get_secret_object(namespace, secret_name)
        except KubeApiError as exc:
            raise ServingMaterialError(f"cannot read {where}: {exc}") from None
        if found is None:
            made = generate(names, now)
            try:
                created = adapter.create_secret(
                    namespace, secret_name, made.data(), SECRET_TYPE, LABELS
                )
            except KubeApiError as exc:
                raise ServingMaterialError(f"cannot create {where}: {exc}") from None
            if created == "created":
                log.info("guard: created %s, a new serving certificate for %s", where, names[0])
                return made
            log.info("guard: %s was created meanwhile (the other replica): reading it", where)
            continue
        data = _decoded(found)
        material, why = check(data, names, now)
        if material is not None:
            return material
        made = generate(names, now, previous_ca=_first_authority(data))
        version = str((found.get("metadata") or {}).get("resourceVersion", ""))
        try:
            updated = adapter.update_secret(
                namespace, secret_name, made.data(), version, SECRET_TYPE, LABELS
            )
        except KubeApiError as exc:
            raise ServingMaterialError(f"cannot renew {where} ({why}): {exc}") from None
        if updated:
            log.info("guard: renewed %s: %s", where, why)
            return made
        log.info("guard: %s changed meanwhile (the other replica): reading it again", where)
    raise ServingMaterialError(f"{where} kept changing ({ATTEMPTS} tries)")


def _write_private(path: Path, content: bytes) -> None:
    """``content`` into ``path`` with mode 0600, replaced whole (never half written)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def ensure_serving_material(
    adapter: KubeAdapter,
    *,
    namespace: str,
    secret_name: str,
    service_name: str,
    webhook_name: str,
    directory: Path,
    now: datetime.datetime | None = None,
) -> ServingMaterial:
    """The webhook's serving certificate and key, written to ``directory`` (mode 0600), from the
    Secret ``secret_name`` in ``namespace`` (made or renewed there when it cannot serve the
    Service ``service_name`` for 30 more days), with the ValidatingWebhookConfiguration
    ``webhook_name`` made to trust its authority. ``ServingMaterialError`` when the Secret can
    be neither read nor written; a webhook configuration that is missing or cannot be patched is
    logged, not raised (the API server then fails its calls, and lets the requests through)."""
    names = service_names(service_name, namespace)
    material = _settle_secret(adapter, namespace, secret_name, names, now or _utcnow())
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / CERT_FILE, directory / KEY_FILE
    _write_private(key_file, material.key_pem)
    _write_private(cert_file, material.cert_pem)
    try:
        installed = adapter.patch_webhook_ca_bundle(webhook_name, material.ca_pem)
    except KubeApiError as exc:
        log.error(
            "guard: the caBundle of ValidatingWebhookConfiguration %s is not set (%s): the API "
            "server cannot trust the webhook and lets evictions and deletes through",
            webhook_name,
            exc,
        )
    else:
        if not installed:
            log.warning(
                "guard: no ValidatingWebhookConfiguration %s: the webhook is not installed "
                "(deploy/components/guard), so nothing calls it",
                webhook_name,
            )
    return ServingMaterial(str(cert_file), str(key_file), material.ca_pem)


__all__ = ["ServingMaterial", "ServingMaterialError", "ensure_serving_material", "service_names"]
