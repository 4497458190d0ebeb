"""Lease-based leader election: acquire, hold off others, renew, release, stop cleanly."""

import copy
import json
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration
from pytest_httpserver import HTTPServer

from placer.kube.leader import (
    ApiLeaseClient,
    LeaderConfig,
    LeaderElector,
    LeaseError,
    micro_time,
    run_with_leader_election,
)

MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
FAST = LeaderConfig(lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)
# for timing bounds: wide enough margins for a loaded CI machine
TIMED = LeaderConfig(lease_duration=2.0, renew_deadline=1.0, retry_period=0.1)


class MemoryLeases:
    """One Lease with the API server's optimistic concurrency (resourceVersion checks)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.fail = False
        self.lock = threading.Lock()
        self.writes = 0

    def get(self) -> dict[str, Any] | None:
        with self.lock:
            if self.fail:
                raise LeaseError("server down")
            return copy.deepcopy(self.lease)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.lease = stored
        return copy.deepcopy(stored)

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            if self.fail:
                raise LeaseError("server down")
            return None if self.lease is not None else self._store(body)

    def replace(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            if self.fail:
                raise LeaseError("server down")
            if self.lease is None:
                return None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                return None
            return self._store(body)

    @property
    def holder(self) -> str | None:
        return ((self.lease or {}).get("spec") or {}).get("holderIdentity")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLeases, identity: str, clock: Clock) -> LeaderElector:
    config = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2)
    return LeaderElector(store, identity, config, namespace="ns", name="lock", clock=clock)


def test_first_candidate_creates_the_lease() -> None:
    store, clock = MemoryLeases(), Clock()
    assert elector(store, "a", clock).try_acquire_or_renew()
    assert store.lease is not None
    spec = store.lease["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO.match(spec["renewTime"]) and MICRO.match(spec["acquireTime"])
    assert store.lease["metadata"] == {"name": "lock", "namespace": "ns", "resourceVersion": "1"}


def test_others_wait_a_full_lease_duration_after_the_last_renewal_they_saw() -> None:
    store, clock = MemoryLeases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.now += 10
    assert a.try_acquire_or_renew()  # renewal: b sees a new version and restarts its timer
    clock.now += 10
    assert not b.try_acquire_or_renew()
    clock.now += 14
    assert not b.try_acquire_or_renew()
    clock.now += 1.5  # a stopped renewing 15.5 s ago by b's clock
    assert b.try_acquire_or_renew()
    assert store.holder == "b"
    assert store.lease is not None and store.lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire_or_renew()  # a sees b holding and not expired


def test_renewal_keeps_the_acquire_time() -> None:
    store, clock = MemoryLeases(), Clock()
    wall = [datetime(2024, 1, 1, tzinfo=UTC)]
    a = LeaderElector(
        store, "a", namespace="ns", name="lock", clock=clock, wall_clock=lambda: wall[0]
    )
    assert a.try_acquire_or_renew()
    wall[0] = datetime(2024, 1, 1, 0, 0, 5, 250000, tzinfo=UTC)
    assert a.try_acquire_or_renew()
    assert store.lease is not None
    assert store.lease["spec"]["acquireTime"] == "2024-01-01T00:00:00.000000Z"
    assert store.lease["spec"]["renewTime"] == "2024-01-01T00:00:05.250000Z"


def test_release_lets_a_standby_take_over_at_once() -> None:
    store, clock = MemoryLeases(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert store.holder is None
    assert store.lease is not None and store.lease["spec"]["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()
    assert not a.release()  # not the holder any more: nothing to release


def test_a_lost_race_is_not_leadership() -> None:
    store, clock = MemoryLeases(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    stale = store.get()
    assert stale is not None
    store.replace({**stale, "spec": {**stale["spec"], "holderIdentity": "intruder"}})
    clock.now += 100
    real_get = store.get
    store.get = lambda: stale  # type: ignore[method-assign]  # a's read is already stale
    assert not a.try_acquire_or_renew()
    store.get = real_get  # type: ignore[method-assign]


def test_server_errors_are_not_leadership() -> None:
    store, clock = MemoryLeases(), Clock()
    store.fail = True
    assert not elector(store, "a", clock).try_acquire_or_renew()


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderConfig(lease_duration=5, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderConfig(lease_duration=15, renew_deadline=2, retry_period=2)


def _wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_run_leads_then_stops_cleanly_and_releases() -> None:
    store = MemoryLeases()
    stop = threading.Event()
    calls: list[str] = []
    a = LeaderElector(store, "a", FAST, namespace="ns", name="lock")
    thread = threading.Thread(
        target=a.run, args=(lambda: calls.append("started"), lambda: calls.append("stopped"), stop)
    )
    thread.start()
    assert _wait_for(lambda: a.is_leader)
    assert _wait_for(lambda: store.writes >= 3)  # renewing
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive()
    assert calls == ["started", "stopped"]
    assert store.holder is None and not a.is_leader


def test_leadership_is_given_up_when_renewal_fails_past_the_deadline() -> None:
    store = MemoryLeases()
    stop = threading.Event()
    calls: list[str] = []
    a = LeaderElector(store, "a", TIMED, namespace="ns", name="lock")
    thread = threading.Thread(
        target=a.run, args=(lambda: calls.append("started"), lambda: calls.append("stopped"), stop)
    )
    thread.start()
    assert _wait_for(lambda: a.is_leader)
    store.fail = True
    failed_at = time.monotonic()
    assert _wait_for(lambda: not a.is_leader)
    # stepped down after renew_deadline, before the lease could expire for anyone else
    assert TIMED.renew_deadline - 0.1 <= time.monotonic() - failed_at < TIMED.lease_duration
    assert _wait_for(lambda: calls == ["started", "stopped"])
    store.fail = False
    assert _wait_for(lambda: a.is_leader)  # campaigns again once the server is back
    stop.set()
    thread.join(timeout=2)
    assert calls == ["started", "stopped", "started", "stopped"]


def test_two_candidates_never_lead_together_and_hand_over_on_shutdown() -> None:
    store = MemoryLeases()
    leaders: set[str] = set()
    overlap: list[set[str]] = []
    lock = threading.Lock()

    def started(name: str) -> None:
        with lock:
            leaders.add(name)
            if len(leaders) > 1:
                overlap.append(set(leaders))

    def stopped(name: str) -> None:
        with lock:
            leaders.discard(name)

    electors = [LeaderElector(store, n, TIMED, namespace="ns", name="lock") for n in ("a", "b")]
    stops = [threading.Event(), threading.Event()]
    threads = [
        threading.Thread(
            target=e.run,
            args=(lambda n=e.identity: started(n), lambda n=e.identity: stopped(n), stop),
        )
        for e, stop in zip(electors, stops, strict=True)
    ]
    for t in threads:
        t.start()
    assert _wait_for(lambda: any(e.is_leader for e in electors))
    time.sleep(0.3)
    assert sum(e.is_leader for e in electors) == 1
    first = next(i for i, e in enumerate(electors) if e.is_leader)
    other = 1 - first
    stops[first].set()  # the leader shuts down: it releases, the standby need not wait
    threads[first].join(timeout=2)
    began = time.monotonic()
    assert _wait_for(lambda: electors[other].is_leader)
    assert time.monotonic() - began < TIMED.lease_duration
    stops[other].set()
    threads[other].join(timeout=2)
    assert not overlap
    assert not any(t.is_alive() for t in threads)


def test_api_lease_client_request_shapes(httpserver: HTTPServer) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/rp/leases"
    httpserver.expect_ordered_request(f"{path}/binder", method="GET").respond_with_json(
        {"kind": "Status", "code": 404, "reason": "NotFound"}, status=404
    )
    httpserver.expect_ordered_request(path, method="POST").respond_with_json(
        {"metadata": {"name": "binder", "resourceVersion": "1"}, "spec": {}}, status=201
    )
    httpserver.expect_ordered_request(f"{path}/binder", method="PUT").respond_with_json(
        {"kind": "Status", "code": 409, "reason": "Conflict"}, status=409
    )
    httpserver.expect_ordered_request(f"{path}/binder", method="GET").respond_with_json(
        {"kind": "Status", "code": 500, "message": "etcd down"}, status=500
    )
    client = ApiLeaseClient(
        ApiClient(Configuration(host=httpserver.url_for("").rstrip("/"))), "rp", "binder"
    )
    elector = LeaderElector(client, "pod-a", LeaderConfig())
    assert elector.try_acquire_or_renew()
    created = json.loads(httpserver.log[1][0].get_data())
    assert created["apiVersion"] == "coordination.k8s.io/v1" and created["kind"] == "Lease"
    assert created["metadata"] == {"name": "binder", "namespace": "rp"}
    assert created["spec"]["holderIdentity"] == "pod-a"
    assert MICRO.match(created["spec"]["renewTime"])  # MicroTime: six digits, always
    assert httpserver.log[1][0].headers["Content-Type"] == "application/json"
    assert client.replace({"metadata": {"name": "binder", "resourceVersion": "1"}}) is None
    with pytest.raises(LeaseError, match="500 etcd down"):
        client.get()


def test_run_with_leader_election_returns_when_stopped(httpserver: HTTPServer) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/rp/leases"
    httpserver.expect_request(f"{path}/binder", method="GET").respond_with_json(
        {"kind": "Status", "code": 500, "message": "unavailable"}, status=500
    )
    stop = threading.Event()
    started: list[bool] = []
    thread = threading.Thread(
        target=run_with_leader_election,
        args=(
            ApiClient(Configuration(host=httpserver.url_for("").rstrip("/"))),
            "rp",
            "binder",
            "pod-a",
            lambda: started.append(True),
            lambda: None,
            stop,
            FAST,
        ),
    )
    thread.start()
    assert _wait_for(lambda: len(httpserver.log) >= 2)
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive() and not started


def test_micro_time_always_has_six_digits() -> None:
    assert micro_time(datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)) == "2024-05-06T07:08:09.000000Z"


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    return ("127.0.0.1", 0)
