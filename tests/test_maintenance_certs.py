"""The guard's serving certificate (placer.maintenance.certs): made once and shared by both
binder replicas, renewed before it ends, trusted by the webhook configuration, and good for a
real TLS handshake by the Service's name."""

import base64
import datetime
import socket
import ssl
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from cryptography import x509

from placer.kube.adapter import KubeApiError
from placer.kube.fake import FakeKubeAdapter
from placer.maintenance.certs import (
    CA_KEY,
    CERT_KEY,
    KEY_KEY,
    SECRET_TYPE,
    ServingMaterial,
    ServingMaterialError,
    check,
    ensure_serving_material,
    generate,
    service_names,
)

NAMESPACE = "redis-placer"
SECRET = "redis-placer-webhook-tls"
SERVICE = "redis-placer-webhook"
WEBHOOK = "redis-placer-guard"
HOST = f"{SERVICE}.{NAMESPACE}.svc"
NOW = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)


def configuration() -> dict[str, Any]:
    webhook = {"clientConfig": {"service": {"name": SERVICE, "namespace": NAMESPACE}}}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [
            {"name": "evictions.guard.redis-placer.io", **webhook},
            {"name": "deletes.guard.redis-placer.io", **webhook},
        ],
    }


@pytest.fixture
def fake() -> FakeKubeAdapter:
    adapter = FakeKubeAdapter()
    adapter.webhook_configurations[WEBHOOK] = configuration()
    return adapter


def ensure(
    adapter: FakeKubeAdapter, directory: Path, now: datetime.datetime = NOW
) -> ServingMaterial:
    return ensure_serving_material(
        adapter,
        namespace=NAMESPACE,
        secret_name=SECRET,
        service_name=SERVICE,
        webhook_name=WEBHOOK,
        directory=directory,
        now=now,
    )


def bundles(adapter: FakeKubeAdapter) -> list[bytes]:
    return [
        base64.b64decode(w["clientConfig"]["caBundle"])
        for w in adapter.webhook_configurations[WEBHOOK]["webhooks"]
    ]


def leaf(material: ServingMaterial) -> x509.Certificate:
    return x509.load_pem_x509_certificate(Path(material.cert_file).read_bytes())


def test_first_start_creates_the_secret_and_trusts_its_authority(
    fake: FakeKubeAdapter, tmp_path: Path
) -> None:
    material = ensure(fake, tmp_path / "tls")
    assert fake.secret_writes == [("create", (NAMESPACE, SECRET))]
    assert fake.secret_meta[(NAMESPACE, SECRET)]["type"] == SECRET_TYPE
    data = fake.secrets[(NAMESPACE, SECRET)]
    assert set(data) == {CA_KEY, CERT_KEY, KEY_KEY}
    assert data[CA_KEY] == material.ca_pem
    assert Path(material.cert_file).read_bytes() == data[CERT_KEY]
    assert Path(material.key_file).read_bytes() == data[KEY_KEY]
    for path in (material.cert_file, material.key_file):
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert bundles(fake) == [material.ca_pem, material.ca_pem]
    assert fake.webhook_patches == [WEBHOOK]
    cert = leaf(material)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == list(service_names(SERVICE, NAMESPACE))
    assert cert.not_valid_after_utc == NOW + datetime.timedelta(days=365)
    (ca,) = x509.load_pem_x509_certificates(material.ca_pem)
    assert ca.not_valid_after_utc == NOW + datetime.timedelta(days=3650)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    cert.verify_directly_issued_by(ca)


def test_second_start_reuses_it_and_patches_nothing(fake: FakeKubeAdapter, tmp_path: Path) -> None:
    first = ensure(fake, tmp_path / "a")
    second = ensure(fake, tmp_path / "b", NOW + datetime.timedelta(days=200))
    assert fake.secret_writes == [("create", (NAMESPACE, SECRET))]
    assert second.ca_pem == first.ca_pem
    assert Path(second.cert_file).read_bytes() == Path(first.cert_file).read_bytes()
    assert fake.webhook_patches == [WEBHOOK]  # the bundle was there already


def test_a_certificate_that_ends_within_30_days_is_renewed(
    fake: FakeKubeAdapter, tmp_path: Path
) -> None:
    first = ensure(fake, tmp_path / "a")
    later = NOW + datetime.timedelta(days=340)  # 25 days before the serving certificate ends
    renewed = ensure(fake, tmp_path / "b", later)
    assert fake.secret_writes == [
        ("create", (NAMESPACE, SECRET)),
        ("update", (NAMESPACE, SECRET)),
    ]
    assert leaf(renewed).not_valid_after_utc == later + datetime.timedelta(days=365)
    new_ca, old_ca = x509.load_pem_x509_certificates(renewed.ca_pem)
    # the previous authority stays trusted: the other replica may serve its certificate still
    assert old_ca == x509.load_pem_x509_certificate(first.ca_pem)
    leaf(renewed).verify_directly_issued_by(new_ca)
    assert bundles(fake) == [renewed.ca_pem, renewed.ca_pem]
    assert fake.webhook_patches == [WEBHOOK, WEBHOOK]
    assert fake.secrets[(NAMESPACE, SECRET)][CERT_KEY] == Path(renewed.cert_file).read_bytes()


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda d: d.pop(KEY_KEY), "it has no tls.key"),
        (lambda d: d.update({CERT_KEY: b"not a certificate"}), "cannot be read"),
        (lambda d: d.update({KEY_KEY: generate(("x",), NOW).key_pem}), "is not the key of"),
        (lambda d: d.update({CA_KEY: generate(("x",), NOW).ca_pem}), "is not signed by"),
    ],
)
def test_a_secret_that_cannot_serve_is_replaced(
    fake: FakeKubeAdapter, tmp_path: Path, spoil: Any, why: str
) -> None:
    ensure(fake, tmp_path / "a")
    data = dict(fake.secrets[(NAMESPACE, SECRET)])
    spoil(data)
    assert why in check(data, service_names(SERVICE, NAMESPACE), NOW)[1]
    fake.secrets[(NAMESPACE, SECRET)] = data
    material = ensure(fake, tmp_path / "b")
    assert fake.secret_writes[-1] == ("update", (NAMESPACE, SECRET))
    assert check(fake.secrets[(NAMESPACE, SECRET)], service_names(SERVICE, NAMESPACE), NOW)[0]
    assert bundles(fake) == [material.ca_pem, material.ca_pem]


def test_a_certificate_for_another_service_is_replaced(
    fake: FakeKubeAdapter, tmp_path: Path
) -> None:
    other = generate(service_names("other", NAMESPACE), NOW)
    fake.create_secret(NAMESPACE, SECRET, other.data(), SECRET_TYPE)
    material = ensure(fake, tmp_path)
    assert fake.secret_writes[-1] == ("update", (NAMESPACE, SECRET))
    assert HOST in leaf(material).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)


class LosesTheRace(FakeKubeAdapter):
    """The other replica writes its Secret between this one's read and its own write."""

    def __init__(self, winner: dict[str, bytes], *, to_update: bool = False) -> None:
        super().__init__()
        self.winner = winner
        self.to_update = to_update
        self.webhook_configurations[WEBHOOK] = configuration()

    def _other_replica_writes(self) -> None:
        key = (NAMESPACE, SECRET)
        if key in self.secrets:
            self.secrets[key] = dict(self.winner)
            self.secret_meta[key]["resourceVersion"] = "winner"
        else:
            self.secrets[key] = dict(self.winner)
            self.secret_meta[key] = {"type": SECRET_TYPE, "labels": {}}

    def create_secret(self, *args: Any, **kwargs: Any) -> Literal["created", "exists"]:
        self._other_replica_writes()
        return super().create_secret(*args, **kwargs)

    def update_secret(self, *args: Any, **kwargs: Any) -> bool:
        if self.to_update:
            self.to_update = False
            self._other_replica_writes()
        return super().update_secret(*args, **kwargs)


def test_a_lost_create_race_uses_the_winners_secret(tmp_path: Path) -> None:
    winner = generate(service_names(SERVICE, NAMESPACE), NOW).data()
    fake = LosesTheRace(winner)
    material = ensure(fake, tmp_path)
    assert fake.secret_writes == []  # its own create answered "exists"
    assert fake.secrets[(NAMESPACE, SECRET)] == winner
    assert Path(material.cert_file).read_bytes() == winner[CERT_KEY]
    assert material.ca_pem == winner[CA_KEY]
    assert bundles(fake) == [winner[CA_KEY], winner[CA_KEY]]


def test_a_lost_renewal_race_uses_the_winners_secret(tmp_path: Path) -> None:
    winner = generate(service_names(SERVICE, NAMESPACE), NOW).data()
    fake = LosesTheRace(winner, to_update=True)
    expiring = generate(service_names(SERVICE, NAMESPACE), NOW - datetime.timedelta(days=350))
    fake.secrets[(NAMESPACE, SECRET)] = expiring.data()
    fake.secret_meta[(NAMESPACE, SECRET)] = {"type": SECRET_TYPE, "labels": {}}
    material = ensure(fake, tmp_path)
    assert fake.secret_writes == []  # its update conflicted; the winner's was read and kept
    assert material.ca_pem == winner[CA_KEY]
    assert Path(material.key_file).read_bytes() == winner[KEY_KEY]


def test_no_webhook_configuration_is_logged_and_serving_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeKubeAdapter()
    material = ensure(fake, tmp_path)
    assert Path(material.cert_file).is_file() and fake.webhook_patches == []
    assert f"no ValidatingWebhookConfiguration {WEBHOOK}" in caplog.text


def test_a_secret_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    class Forbidden(FakeKubeAdapter):
        def create_secret(self, *args: Any, **kwargs: Any) -> Literal["created", "exists"]:
            raise KubeApiError("create secret", 403, "forbidden")

    with pytest.raises(ServingMaterialError, match=r"cannot create secret .*403"):
        ensure(Forbidden(), tmp_path)


# -- a real TLS handshake --------------------------------------------------------------------


@pytest.fixture
def tls_server(fake: FakeKubeAdapter, tmp_path: Path) -> Iterator[tuple[int, ServingMaterial]]:
    """A TLS echo on 127.0.0.1 with the material's files: one connection, one line."""
    material = ensure(fake, tmp_path, datetime.datetime.now(datetime.UTC))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(material.cert_file, material.key_file)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with context.wrap_socket(connection, server_side=True) as tls:
                tls.sendall(tls.recv(64).upper())
        except ssl.SSLError:
            connection.close()  # the client refused the certificate

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port, material
    listener.close()
    thread.join(timeout=10)


def test_a_client_that_trusts_the_bundle_reaches_the_service_name(
    tls_server: tuple[int, ServingMaterial],
) -> None:
    port, material = tls_server
    client = ssl.create_default_context(cadata=material.ca_pem.decode())
    assert client.verify_mode == ssl.CERT_REQUIRED and client.check_hostname
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        client.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        peer = tls.getpeercert()
        assert peer is not None and peer["subject"] == ((("commonName", HOST),),)
        tls.sendall(b"ping")
        assert tls.recv(64) == b"PING"


def test_a_client_that_trusts_the_bundle_refuses_another_name(
    tls_server: tuple[int, ServingMaterial],
) -> None:
    port, material = tls_server
    client = ssl.create_default_context(cadata=material.ca_pem.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match="mismatch"),
    ):
        client.wrap_socket(raw, server_hostname=f"{SERVICE}.elsewhere.svc")
