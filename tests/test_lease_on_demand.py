"""The Lease a binder without leader election takes only while it has work."""

import threading
import time
from collections.abc import Callable

from placer.kube.leader import LeaderConfig, LeaderElector, LeaseOnDemand
from tests.test_kube_leader import MemoryLeases

FAST = LeaderConfig(lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)


def _on_demand(store: MemoryLeases, identity: str) -> LeaseOnDemand:
    elector = LeaderElector(store, identity, FAST, namespace="ns", name="lock")
    return LeaseOnDemand(elector, idle_release=0.2)


def _until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_two_binders_with_work_never_hold_it_at_once_and_take_turns() -> None:
    store = MemoryLeases()
    a, b = _on_demand(store, "a"), _on_demand(store, "b")
    stop = threading.Event()
    both: list[bool] = []

    def watch() -> None:
        while not stop.is_set():
            both.append(a.held and b.held)
            time.sleep(0.002)

    threads = [threading.Thread(target=x.run, args=(stop,), daemon=True) for x in (a, b)]
    threads.append(threading.Thread(target=watch, daemon=True))
    for thread in threads:
        thread.start()
    try:
        a.want(True)
        assert _until(lambda: a.held)
        b.want(True)
        time.sleep(0.3)
        assert a.held and not b.held  # b waits while a has work
        a.want(False)  # a is done: it lets go once idle, and b takes over at once
        assert _until(lambda: b.held, timeout=2.0)
        assert not a.held and store.holder == "b"
        b.want(False)
        assert _until(lambda: store.holder is None, timeout=2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
    assert both and not any(both)


def test_without_work_it_never_writes_the_lease() -> None:
    store = MemoryLeases()
    idle = _on_demand(store, "a")
    stop = threading.Event()
    thread = threading.Thread(target=idle.run, args=(stop,), daemon=True)
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(timeout=5)
    assert store.writes == 0 and not idle.held


def test_a_leader_elected_binder_keeps_an_on_demand_one_out() -> None:
    store = MemoryLeases()
    leader = LeaderElector(store, "leader", FAST, namespace="ns", name="lock")
    on_demand = _on_demand(store, "on-demand")
    stop = threading.Event()
    threads = [
        threading.Thread(target=leader.run, args=(lambda: None, lambda: None, stop), daemon=True),
        threading.Thread(target=on_demand.run, args=(stop,), daemon=True),
    ]
    threads[0].start()
    assert _until(lambda: leader.is_leader)
    threads[1].start()
    on_demand.want(True)
    try:
        time.sleep(1.0)  # longer than the lease: the leader keeps renewing it
        assert leader.is_leader and not on_demand.held
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)


def test_two_binders_without_leader_election_bind_each_pod_once_soundly() -> None:
    """Started by mistake side by side: they take turns, and every pod is bound once."""
    from collections import Counter

    from models.kube_objects import build_snapshot
    from models.policy import Policy
    from placer.binder.loop import Binder, BinderConfig
    from placer.kube.fake import FakeKubeAdapter
    from solver.check import audit
    from tests.kube_dicts import node, redis_pod

    policy = Policy.model_validate({"permit": {"batchWindowSeconds": 0.05}})
    fake = FakeKubeAdapter(nodes=[node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(12)])
    store = MemoryLeases()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    for name in ("a", "b"):
        lease = _on_demand(store, name)
        binder = Binder(fake, policy, BinderConfig(solver="greedy", max_batch_pods=3))
        threads.append(threading.Thread(target=lease.run, args=(stop,), daemon=True))
        threads.append(
            threading.Thread(
                target=binder.run,
                args=(stop,),
                kwargs={"leading": lambda lease=lease: lease.held, "want_lease": lease.want},
                daemon=True,
            )
        )
    for thread in threads:
        thread.start()
    try:
        for shard in range(8):
            for i in range(3):
                fake.add_pod(
                    redis_pod(
                        f"c-{shard}-{i}",
                        "c",
                        shard,
                        None,
                        schedulerName="redis-placer",
                        annotations={"redis-placer.io/shard-size": "3"},
                    )
                )
            time.sleep(0.1)
        assert _until(lambda: len(fake.binds) == 24, timeout=30)
        time.sleep(0.3)  # anything still to come would show now
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert Counter(key for key, _ in fake.binds) == Counter(dict.fromkeys(fake.pods, 1))
    cluster = build_snapshot([*fake.list_nodes(), *fake.list_pods()], policy)
    assert [v for v in audit(cluster, policy) if v.severity == "hard"] == []
