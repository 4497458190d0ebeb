"""The adapter's calls for the maintenance guard (its serving Secret, the webhook configuration's
caBundle, the pod annotation), through the real client against a local HTTP server."""

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from pytest_httpserver import HTTPServer

from placer.kube import KubeApiError, KubernetesAdapter, PatchOutcome
from placer.kube.fake import FakeKubeAdapter
from tests.test_kube_adapter import body_of, gated_pod, only_request, status

SECRETS = "/api/v1/namespaces/rp/secrets"
CONFIGURATION = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/guard"
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
BUNDLE = base64.b64encode(CA).decode()


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)


@pytest.fixture
def adapter(httpserver: HTTPServer) -> Iterator[KubernetesAdapter]:
    configuration = Configuration(host=httpserver.url_for("").rstrip("/"), no_proxy="127.0.0.1")
    client = ApiClient(configuration)
    yield KubernetesAdapter(client, instance="test-instance", request_timeout=5)
    client.close()


def test_create_secret_posts_its_data_base64_and_its_type(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request(SECRETS, method="POST").respond_with_json({}, status=201)
    created = adapter.create_secret(
        "rp", "tls", {"tls.crt": b"c", "tls.key": b"k"}, "kubernetes.io/tls", {"a": "b"}
    )
    assert created == "created"
    request = only_request(httpserver)
    assert request.headers["Content-Type"] == "application/json"
    assert body_of(request) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tls", "namespace": "rp", "labels": {"a": "b"}},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Yw==", "tls.key": "aw=="},
    }


def test_create_secret_that_exists_and_one_refused(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(SECRETS, method="POST").respond_with_json(
        status(409, "AlreadyExists", 'secrets "tls" already exists'), status=409
    )
    httpserver.expect_ordered_request(SECRETS, method="POST").respond_with_json(
        status(403, "Forbidden", "no"), status=403
    )
    assert adapter.create_secret("rp", "tls", {}, "Opaque") == "exists"
    with pytest.raises(KubeApiError, match="create secret rp/tls: HTTP 403"):
        adapter.create_secret("rp", "tls", {}, "Opaque")


def test_update_secret_is_guarded_by_its_resource_version(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(f"{SECRETS}/tls", method="PUT").respond_with_json({})
    httpserver.expect_ordered_request(f"{SECRETS}/tls", method="PUT").respond_with_json(
        status(409, "Conflict", "the object has been modified"), status=409
    )
    assert adapter.update_secret("rp", "tls", {"ca.crt": b"x"}, "41", "kubernetes.io/tls")
    body = body_of(httpserver.log[0][0])
    assert body["metadata"]["resourceVersion"] == "41"
    assert body["type"] == "kubernetes.io/tls" and body["data"] == {"ca.crt": "eA=="}
    assert adapter.update_secret("rp", "tls", {}, "41", "kubernetes.io/tls") is False


def test_get_secret_object_keeps_its_version_and_data(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    secret = {"metadata": {"name": "tls", "resourceVersion": "7"}, "data": {"k": "dg=="}}
    httpserver.expect_request(f"{SECRETS}/tls").respond_with_json(secret)
    httpserver.expect_request(f"{SECRETS}/gone").respond_with_json(
        status(404, "NotFound", "no"), status=404
    )
    found = adapter.get_secret_object("rp", "tls")
    assert found is not None and found["metadata"]["resourceVersion"] == "7"
    assert found["kind"] == "Secret" and found["data"] == {"k": "dg=="}
    assert adapter.get_secret_object("rp", "gone") is None


def configuration(*bundles: str | None) -> dict[str, Any]:
    webhooks = []
    for n, bundle in enumerate(bundles):
        client: dict[str, Any] = {"service": {"name": "s", "namespace": "rp"}}
        if bundle is not None:
            client["caBundle"] = bundle
        webhooks.append({"name": f"w{n}.example.com", "clientConfig": client})
    return {"metadata": {"name": "guard"}, "webhooks": webhooks}


def test_patch_webhook_ca_bundle_patches_only_the_webhooks_that_differ(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request(CONFIGURATION, method="GET").respond_with_json(
        configuration(BUNDLE, None, "b2xk")
    )
    httpserver.expect_request(CONFIGURATION, method="PATCH").respond_with_json({})
    assert adapter.patch_webhook_ca_bundle("guard", CA) is True
    (patch,) = [r for r, _ in httpserver.log if r.method == "PATCH"]
    assert patch.headers["Content-Type"] == "application/json-patch+json"
    assert body_of(patch) == [
        {"op": "test", "path": "/webhooks/1/name", "value": "w1.example.com"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": BUNDLE},
        {"op": "test", "path": "/webhooks/2/name", "value": "w2.example.com"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": BUNDLE},
    ]


def test_patch_webhook_ca_bundle_sends_nothing_when_it_is_there_and_false_when_absent(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(CONFIGURATION, method="GET").respond_with_json(
        configuration(BUNDLE, BUNDLE)
    )
    httpserver.expect_ordered_request(CONFIGURATION, method="GET").respond_with_json(
        status(404, "NotFound", "no"), status=404
    )
    assert adapter.patch_webhook_ca_bundle("guard", CA) is True
    assert adapter.patch_webhook_ca_bundle("guard", CA) is False
    assert [r.method for r, _ in httpserver.log] == ["GET", "GET"]


def test_patch_webhook_ca_bundle_reads_again_when_the_configuration_changed(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_ordered_request(CONFIGURATION, method="GET").respond_with_json(
        configuration(None)
    )
    httpserver.expect_ordered_request(CONFIGURATION, method="PATCH").respond_with_json(
        status(422, "Invalid", "the test operation failed"), status=422
    )
    httpserver.expect_ordered_request(CONFIGURATION, method="GET").respond_with_json(
        configuration(BUNDLE)
    )
    assert adapter.patch_webhook_ca_bundle("guard", CA) is True
    assert [r.method for r, _ in httpserver.log] == ["GET", "PATCH", "GET"]


def test_annotate_pod_is_a_merge_patch_of_annotations(
    httpserver: HTTPServer, adapter: KubernetesAdapter
) -> None:
    httpserver.expect_request("/api/v1/namespaces/ns/pods/p", method="PATCH").respond_with_json(
        gated_pod()
    )
    result = adapter.annotate_pod("ns", "p", {"redis-placer.io/handover-requested": "x", "o": None})
    assert result.ok
    request = only_request(httpserver)
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert body_of(request) == {
        "metadata": {"annotations": {"redis-placer.io/handover-requested": "x", "o": None}}
    }


def test_the_fakes_annotate_pod_sets_and_removes() -> None:
    fake = FakeKubeAdapter(pods=[{"metadata": {"name": "p", "namespace": "ns"}}])
    assert fake.annotate_pod("ns", "p", {"a": "1", "b": "2"}).ok
    after = fake.annotate_pod("ns", "p", {"a": None})
    assert after.ok and after.pod is not None
    assert after.pod["metadata"]["annotations"] == {"b": "2"}
    stale = fake.annotate_pod("ns", "p", {"a": "1"}, resource_version="1")
    assert stale.outcome is PatchOutcome.CONFLICT
    assert fake.annotate_pod("ns", "gone", {"a": "1"}).outcome is PatchOutcome.GONE
