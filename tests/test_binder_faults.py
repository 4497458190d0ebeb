"""The binder when the API server stops answering: what it may decide from, and when it is back.

Against the in-memory adapter: a write the server made without saying so, lists that fail and
then succeed, the retries that wait meanwhile, and the Lease tried again the moment the server
answers. tests/e2e/test_fault_drills_e2e.py runs the same on a real control plane.
"""

import threading
import time
from collections import Counter
from typing import Any

import pytest

from models.kube_objects import flatten
from models.policy import Policy
from models.synthetic import generate_cluster
from placer.binder.loop import Binder, BinderConfig
from placer.kube.adapter import BindOutcome, BindResult, KubeApiError
from placer.kube.fake import FakeKubeAdapter
from placer.kube.leader import LeaderConfig, LeaderElector
from tests.test_kube_leader import MemoryLeases


class Flaky(FakeKubeAdapter):
    """The fake cluster, with a switch for the API server being down, and bindings it makes
    without answering (as when the server stops after writing, before replying)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.down = False
        self.unanswered = 0
        """The next this many bindings are made, and answered as if the connection broke."""
        self.lists = 0

    def list_pods_with_version(self, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        if self.down:
            raise KubeApiError("list pods", 0, "connection refused")
        return super().list_pods_with_version(*args, **kwargs)

    def watch_pods(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise KubeApiError("watch pods", 0, "connection refused")
        return super().watch_pods(*args, **kwargs)

    def bind_pod(self, *args: Any, **kwargs: Any) -> BindResult:
        if self.down:
            return BindResult(BindOutcome.ERROR, 0, "connection refused")
        result = super().bind_pod(*args, **kwargs)
        if self.unanswered and result.ok:
            self.unanswered -= 1
            return BindResult(BindOutcome.ERROR, 0, "RemoteDisconnected: connection aborted")
        return result


def _flaky(nodes: int = 12, shards: int = 4) -> Flaky:
    objs = flatten([generate_cluster(nodes, shards)])
    return Flaky(
        nodes=[o for o in objs if o["kind"] == "Node"],
        pods=[o for o in objs if o["kind"] == "Pod"],
    )


def test_a_binding_made_without_an_answer_is_listed_before_the_next_decision() -> None:
    """The server bound the pod but the answer was lost: the cache may be stale, so the next
    step lists the cluster before it decides, and no pod is bound twice."""
    fake = _flaky(shards=1)
    binder = Binder(fake, Policy(), BinderConfig())
    told: list[bool] = []
    binder.readable_listeners.append(told.append)
    binder.step(now=1000.0)  # the first list; the batch window opens
    assert told == [True] and binder.cache.lost is None
    fake.unanswered = 1
    first = binder.step(now=1001.5)
    assert len(fake.binds) == 1 and first.failed  # made, but not known to be made
    assert binder.cache.lost is not None and not binder.cache.synced
    assert told == [True, False]
    assert binder.metrics.cluster_readable._value.get() == 0
    lists = fake.lists
    second = binder.step(now=1002.0)
    assert fake.lists == lists + 1  # listed before deciding
    assert binder.cache.synced and binder.cache.lost is None and told == [True, False, True]
    assert binder.cache.recoveries == 1
    binder.step(now=1004.0)
    assert len(second.bound) + len(first.bound) <= 3
    bound = Counter(key for key, _ in fake.binds)
    assert len(bound) == 3 and set(bound.values()) == {1}
    assert len({node for _, node in fake.binds}) == 3  # no two members on one host


def test_no_decision_while_the_cluster_cannot_be_listed_and_the_retries_go_when_it_answers() -> (
    None
):
    fake = _flaky(shards=2)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    told: list[bool] = []
    binder.readable_listeners.append(told.append)
    stop = threading.Event()
    fake.down = True
    loop = threading.Thread(target=binder.run, args=(stop,), daemon=True)
    loop.start()
    try:
        time.sleep(1.5)  # the first list keeps failing: no crash, nothing decided
        assert loop.is_alive() and fake.binds == [] and told == [False]
        assert binder.metrics.cluster_unreadable._value.get() == 1
        fake.down = False
        deadline = time.monotonic() + 30
        while len(fake.binds) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fake.binds) == 6 and told == [False, True]
        fake.down = True  # the server stops again mid-run: the watches break
        deadline = time.monotonic() + 30
        while told[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert told == [False, True, False]
        fake.down = False
        while not told[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert told == [False, True, False, True]
    finally:
        stop.set()
        loop.join(timeout=10)
    assert not loop.is_alive()


def test_shards_whose_writes_failed_meanwhile_are_retried_at_once_when_the_cluster_answers() -> (
    None
):
    binder = Binder(_flaky(), Policy(), BinderConfig())
    holding = binder.holding
    for attempt in range(5):
        holding.backoff("ns/failed", 1000.0 + attempt)
    holding.leave_out("ns/refused", 1000.0)
    assert holding.retry["ns/failed"][1] > 1010.0
    holding.retry_now()
    assert "ns/failed" not in holding.retry
    assert "ns/refused" in holding.retry  # the solver's refusal keeps its own backoff


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_standby_watches_the_lease_closely_and_is_due_the_moment_it_expires() -> None:
    store, clock = MemoryLeases(), Clock()
    config = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2, watch_period=0.5)
    leader = LeaderElector(store, "a", config, namespace="ns", name="lock", clock=clock)
    standby = LeaderElector(store, "b", config, namespace="ns", name="lock", clock=clock)
    assert leader.try_acquire_or_renew()
    assert not standby.try_acquire_or_renew()
    assert standby.next_round_in() == pytest.approx(0.5)  # not the 2-2.4 s retry period
    clock.now = 14.8
    assert standby.next_round_in() == pytest.approx(0.21)  # the expiry, not a period past it
    clock.now = 15.01
    assert standby.try_acquire_or_renew()  # a stopped renewing 15 s ago by b's clock
    assert standby.expires_in() is None  # it holds the Lease now


def test_a_poke_starts_the_next_lease_round_at_once() -> None:
    elector = LeaderElector(MemoryLeases(), "a", LeaderConfig(), namespace="ns", name="lock")
    stop = threading.Event()
    waited = threading.Thread(target=elector._wait, args=(60.0, stop), daemon=True)
    started = time.monotonic()
    waited.start()
    elector.poke()
    waited.join(timeout=10)
    assert not waited.is_alive() and time.monotonic() - started < 10


def test_leadership_lapses_at_the_renew_deadline_while_a_renewal_still_waits() -> None:
    """A renewal blocked on a server that does not answer (a read timeout, then the client's
    retries) can outlast the Lease: the leader must stop acting at the renew deadline, before a
    standby can take the Lease, not when the blocked round finally returns."""
    store, clock = MemoryLeases(), Clock()
    config = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2)
    elector = LeaderElector(store, "a", config, namespace="ns", name="lock", clock=clock)
    assert elector.try_acquire_or_renew()
    elector._leader.set()  # as run() does on taking it
    clock.now = 9.9
    assert elector.is_leader
    clock.now = 10.0  # no renewal since: the round is still blocked
    assert not elector.is_leader
    assert elector.try_acquire_or_renew()  # it answers again: renewed, leading again
    assert elector.is_leader


def test_a_leader_whose_renewal_failed_tries_again_soon_on_a_client_without_retries() -> None:
    from kubernetes.client import ApiClient, Configuration

    from placer.kube.leader import lease_api_client

    store, clock = MemoryLeases(), Clock()
    config = LeaderConfig(lease_duration=15, renew_deadline=10, retry_period=2, watch_period=0.5)
    elector = LeaderElector(store, "a", config, namespace="ns", name="lock", clock=clock)
    assert elector.try_acquire_or_renew()
    elector._leader.set()
    assert elector.next_round_in() == 2
    store.fail = True
    assert not elector.try_acquire_or_renew()
    assert elector.next_round_in() == 0.5  # not a whole period: the deadline is near
    store.fail = False
    assert elector.try_acquire_or_renew() and elector.next_round_in() == 2
    shared = ApiClient(Configuration(host="https://127.0.0.1:6443"))
    lease = lease_api_client(shared)
    assert lease.configuration.retries is False and shared.configuration.retries is None
    assert lease.configuration.host == shared.configuration.host
