"""A Lease the binder can never use (namespace missing, RBAC denial) is said once, clearly.

At start-up it is an error with exit 2 naming the namespace and ``--lease-namespace``; when it
turns up later, one error line with the remedy, not a warning every retry.
"""

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes.client import ApiClient, Configuration
from pytest_httpserver import HTTPServer

from placer.cli import main
from placer.kube.leader import ApiLeaseClient, LeaderConfig, LeaderElector, LeaseUnusable
from tests.test_kube_leader import MemoryLeases

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"


def _client(httpserver: HTTPServer, namespace: str) -> ApiLeaseClient:
    api = ApiClient(Configuration(host=httpserver.url_for("").rstrip("/")))
    return ApiLeaseClient(api, namespace, "redis-placer-binder")


def _missing_namespace(httpserver: HTTPServer, namespace: str) -> None:
    path = LEASES.format(ns=namespace)
    not_found = {"kind": "Status", "code": 404, "reason": "NotFound"}
    httpserver.expect_request(f"{path}/redis-placer-binder", method="GET").respond_with_json(
        not_found, status=404
    )
    httpserver.expect_request(path, method="POST").respond_with_json(
        {**not_found, "message": f'namespaces "{namespace}" not found'}, status=404
    )


def test_probe_names_a_missing_namespace_and_writes_nothing(httpserver: HTTPServer) -> None:
    _missing_namespace(httpserver, "nowhere")
    with pytest.raises(LeaseUnusable) as raised:
        _client(httpserver, "nowhere").probe()
    assert "namespace nowhere does not exist" in str(raised.value)
    assert "--lease-namespace" in str(raised.value)
    post = next(req for req, _ in httpserver.log if req.method == "POST")
    assert post.args.get("dryRun") == "All"  # the check itself creates nothing


def test_probe_names_an_rbac_denial(httpserver: HTTPServer) -> None:
    path = LEASES.format(ns="rp")
    httpserver.expect_request(f"{path}/redis-placer-binder", method="GET").respond_with_json(
        {"kind": "Status", "code": 403, "reason": "Forbidden"}, status=403
    )
    with pytest.raises(LeaseUnusable) as raised:
        _client(httpserver, "rp").probe()
    assert "forbidden" in str(raised.value) and "namespace rp" in str(raised.value)
    assert "--lease-namespace" in str(raised.value)


def test_probe_passes_when_the_namespace_exists(httpserver: HTTPServer) -> None:
    path = LEASES.format(ns="rp")
    httpserver.expect_request(f"{path}/redis-placer-binder", method="GET").respond_with_json(
        {"kind": "Status", "code": 404}, status=404
    )
    httpserver.expect_request(path, method="POST").respond_with_json(
        {"metadata": {"name": "redis-placer-binder"}, "spec": {}}, status=201
    )
    _client(httpserver, "rp").probe()


@pytest.mark.parametrize("leader_elect", ["--no-leader-elect", "--leader-elect"])
def test_binder_with_a_missing_lease_namespace_exits_2_at_start(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch, leader_elect: str
) -> None:
    _missing_namespace(httpserver, "redis-placer")
    api = ApiClient(Configuration(host=httpserver.url_for("").rstrip("/")))

    def connect(*_: Any, **__: Any) -> Any:
        return SimpleNamespace(api_client=api)

    monkeypatch.setattr("placer.binder.command.connect", connect)
    result = CliRunner().invoke(main, ["binder", leader_elect, "--metrics-port", "0"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert "--lease-namespace redis-placer" in lines[0]
    assert "namespace redis-placer does not exist" in lines[0]


class DeniedLeases(MemoryLeases):
    """A Lease store whose RBAC was taken away after start-up."""

    def get(self) -> dict[str, Any] | None:
        raise LeaseUnusable("GET lease rp/lock: forbidden (HTTP 403): grant the Role")


def test_a_lease_lost_to_rbac_later_is_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    config = LeaderConfig(lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)
    elector = LeaderElector(DeniedLeases(), "pod-a", config, namespace="rp", name="lock")
    with caplog.at_level(logging.DEBUG, logger="placer.kube.leader"):
        held = [elector.try_acquire_or_renew() for _ in range(30)]
    assert not any(held)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].levelno == logging.ERROR
    assert "grant the Role" in loud[0].getMessage()


def test_a_transient_failure_is_said_once_until_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryLeases()
    store.fail = True
    elector = LeaderElector(store, "pod-a", LeaderConfig(), namespace="rp", name="lock")
    with caplog.at_level(logging.INFO, logger="placer.kube.leader"):
        for _ in range(10):
            assert not elector.try_acquire_or_renew()
        store.fail = False
        assert elector.try_acquire_or_renew()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert any("answers again" in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)


class NoNamespace(MemoryLeases):
    """Reads answer "no such Lease"; creating one fails: its namespace was deleted."""

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        raise LeaseUnusable("POST lease gone/lock: namespace gone does not exist: create it")


def test_a_namespace_deleted_later_is_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    elector = LeaderElector(NoNamespace(), "pod-a", LeaderConfig(), namespace="gone", name="lock")
    with caplog.at_level(logging.INFO, logger="placer.kube.leader"):
        for _ in range(30):
            assert not elector.try_acquire_or_renew()
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelno for r in said] == [logging.ERROR]
    assert "namespace gone does not exist" in said[0].getMessage()
