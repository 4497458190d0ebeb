"""Metric names and labels, and the /metrics, /healthz, /readyz endpoints on 127.0.0.1."""

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pytest_httpserver import HTTPServer

from placer.metrics import Metrics, MetricsServer, Readiness, push_to_gateway

EXPECTED = {
    # family name: (type, label names)
    "redis_placer_solve_duration_seconds": ("histogram", {"mode"}),
    "redis_placer_solves": ("counter", {"status"}),
    "redis_placer_permit_decisions": ("counter", {"decision"}),
    "redis_placer_pending_pods": ("gauge", set()),
    "redis_placer_gated_pods": ("gauge", set()),
    "redis_placer_binds": ("counter", {"result"}),
    "redis_placer_bind_errors": ("counter", {"reason"}),
    "redis_placer_violations": ("gauge", {"rule", "severity"}),
    "redis_placer_worst_domain_loss_ratio": ("gauge", {"level"}),
}


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Content-Type", "")


@pytest.fixture
def metrics() -> Metrics:
    metrics = Metrics()
    metrics.observe_solve("binder", "OPTIMAL", 0.42)
    metrics.permit("allow", 3)
    metrics.permit("wait")
    metrics.pending_pods.set(4)
    metrics.gated_pods.set(2)
    metrics.bind("bound")
    metrics.bind("conflict", reason="already_bound")
    metrics.set_violations({("replica-separation", "soft"): 2})
    metrics.set_worst_domain_loss({"zone": 0.5, "host": 1 / 6})
    return metrics


@pytest.fixture
def server(metrics: Metrics) -> Iterator[MetricsServer]:
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        yield server


def test_metric_families_names_types_and_labels(metrics: Metrics) -> None:
    families = {f.name: f for f in metrics.registry.collect()}
    for name, (kind, labels) in EXPECTED.items():
        assert name in families, name
        assert families[name].type == kind, name
        for sample in families[name].samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample)
    assert metrics.registry is not REGISTRY
    assert "redis_placer_solves" not in {f.name for f in REGISTRY.collect()}


def test_metric_values(metrics: Metrics) -> None:
    value = metrics.registry.get_sample_value
    assert value("redis_placer_solves_total", {"status": "OPTIMAL"}) == 1
    assert value("redis_placer_solve_duration_seconds_count", {"mode": "binder"}) == 1
    assert value("redis_placer_solve_duration_seconds_sum", {"mode": "binder"}) == pytest.approx(
        0.42
    )
    assert value("redis_placer_permit_decisions_total", {"decision": "allow"}) == 3
    assert value("redis_placer_permit_decisions_total", {"decision": "reject"}) == 0  # pre-created
    assert value("redis_placer_binds_total", {"result": "conflict"}) == 1
    assert value("redis_placer_binds_total", {"result": "gone"}) == 0
    assert value("redis_placer_bind_errors_total", {"reason": "already_bound"}) == 1
    assert value("redis_placer_worst_domain_loss_ratio", {"level": "zone"}) == 0.5
    assert value("redis_placer_pending_pods") == 4


def test_fixed_violations_drop_to_zero(metrics: Metrics) -> None:
    metrics.set_violations({("shard-spread", "hard"): 1})
    value = metrics.registry.get_sample_value
    assert value("redis_placer_violations", {"rule": "replica-separation", "severity": "soft"}) == 0
    assert value("redis_placer_violations", {"rule": "shard-spread", "severity": "hard"}) == 1


def test_unknown_permit_decision_is_refused(metrics: Metrics) -> None:
    with pytest.raises(ValueError, match="allow"):
        metrics.permit("maybe")


def test_two_instances_do_not_collide() -> None:
    Metrics()
    Metrics()  # each has its own registry: no "Duplicated timeseries" error


def test_metrics_endpoint_serves_the_registry(server: MetricsServer) -> None:
    code, body, content_type = get(f"http://127.0.0.1:{server.port}/metrics")
    assert code == 200 and content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert set(EXPECTED) <= set(families)
    assert 'redis_placer_solves_total{status="OPTIMAL"} 1.0' in body


def test_healthz_and_readyz(metrics: Metrics) -> None:
    readiness = Readiness("snapshot", "election")
    with MetricsServer(metrics, port=0, host="127.0.0.1", readiness=readiness) as server:
        base = f"http://127.0.0.1:{server.port}"
        assert get(base + "/healthz")[:2] == (200, "ok\n")
        code, body, _ = get(base + "/readyz")
        assert code == 503 and body == "not ready: election, snapshot\n"
        readiness.set("snapshot")
        assert get(base + "/readyz")[:2] == (503, "not ready: election\n")
        server.set_ready(True, "election")
        assert get(base + "/readyz")[:2] == (200, "ok\n")
        server.set_ready(False, "election")
        assert get(base + "/readyz")[0] == 503
        assert get(base + "/nope")[0] == 404


def test_healthz_reports_a_stalled_process(metrics: Metrics) -> None:
    alive = [True]
    with MetricsServer(metrics, port=0, host="127.0.0.1", alive=lambda: alive[0]) as server:
        assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
        alive[0] = False
        assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 503


def test_default_readiness_toggles(metrics: Metrics) -> None:
    with MetricsServer(metrics, port=0, host="127.0.0.1") as server:
        url = f"http://127.0.0.1:{server.port}/readyz"
        assert get(url)[0] == 503
        server.set_ready()
        assert get(url)[0] == 200


def test_push_to_gateway(httpserver: HTTPServer, metrics: Metrics) -> None:
    httpserver.expect_request(
        "/metrics/job/redis-placer-rebalance", method="PUT"
    ).respond_with_data("", status=200)
    assert push_to_gateway(
        httpserver.url_for("").rstrip("/"), "redis-placer-rebalance", metrics.registry
    )
    pushed = httpserver.log[0][0].get_data(as_text=True)
    assert "redis_placer_solves_total" in pushed


def test_push_failure_is_reported_not_raised(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/metrics/job/j", method="PUT").respond_with_data("no", status=500)
    assert not push_to_gateway(httpserver.url_for("").rstrip("/"), "j", CollectorRegistry())
