"""The binder's decision loop against the in-memory adapter: gangs, binding once, vanished nodes."""

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from models.kube_objects import ROLE_ANNOTATION, flatten
from models.policy import Policy
from models.synthetic import generate_cluster
from placer.binder.holding import EXPLAIN_AGAIN, StepReport
from placer.binder.loop import Binder, BinderConfig
from placer.binder.solving import SAID_BEFORE
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, redis_pod

EVENTUALLY = 120.0
"""How long a test of the running loop waits for what must happen: a bound for a broken loop
only, far beyond what even a heavily loaded machine needs (the waits end when it happens)."""


def _fake(nodes: int = 12, shards: int = 4) -> FakeKubeAdapter:
    objs = flatten([generate_cluster(nodes, shards)])
    return FakeKubeAdapter(
        nodes=[o for o in objs if o["kind"] == "Node"],
        pods=[o for o in objs if o["kind"] == "Pod"],
    )


def _sized(fake: FakeKubeAdapter, size: int) -> None:
    for pod in fake.pods.values():
        pod["metadata"].setdefault("annotations", {})["redis-placer.io/shard-size"] = str(size)


def test_binds_every_pod_once_after_the_batch_window() -> None:
    fake = _fake()
    binder = Binder(fake, Policy(), BinderConfig())
    first = binder.step(now=1000.0)
    assert first.bound == [] and first.next_step_in == 1.0
    second = binder.step(now=1001.5)
    assert second.solve_status in ("OPTIMAL", "FEASIBLE")
    assert len(second.bound) == 12 and len(fake.binds) == 12
    binder.cache.poll(0)
    third = binder.step(now=1003.0)
    assert third.bound == [] and len(fake.binds) == 12
    assert all(p["spec"].get("nodeName") for p in fake.pods.values())
    assert sum(e["reason"] == "Scheduled" for e in fake.events) == 12


def test_incomplete_shard_waits_then_is_held() -> None:
    fake = _fake(shards=1)
    _sized(fake, 4)  # 3 present, 4 expected
    binder = Binder(fake, Policy(), BinderConfig())
    waiting = binder.step(now=1000.0)
    assert [d.decision for d in waiting.decisions] == ["wait"]
    assert waiting.next_step_in <= 30.0
    held = binder.step(now=1000.0 + 31)
    assert [d.decision for d in held.decisions] == ["reject"]
    assert fake.binds == []
    reasons = [e["reason"] for e in fake.events]
    assert reasons.count("WaitingForShard") == 3 and reasons.count("FailedScheduling") == 3


def test_vanished_node_is_not_bound_and_shard_is_solved_again() -> None:
    fake = _fake(shards=1)
    binder = Binder(fake, Policy(), BinderConfig())
    binder.step(now=1000.0)
    solve = binder._solve

    def solve_then_drop(snapshot: Any) -> Any:
        plan = solve(snapshot)
        target = next(a.node for a in plan.assignments if a.action == "place")
        fake.nodes.pop(str(target))
        return plan

    binder._solve = solve_then_drop  # type: ignore[method-assign]
    report = binder.step(now=1002.0)
    assert report.bound == [] and report.failed and fake.binds == []
    binder._solve = solve  # type: ignore[method-assign]
    binder.step(now=1002.0)  # opens a new batch window
    again = binder.step(now=1003.5)
    assert len(again.bound) == 3
    assert {n for _, n in fake.binds} <= set(fake.nodes)


def test_only_the_ready_shards_of_a_batch_are_bound() -> None:
    """A shard still waiting for members is left out of the solve, and none of it is bound."""
    fake = _fake(shards=2)
    shard_of = {k: p["metadata"]["labels"].get("redis-shard") for k, p in fake.pods.items()}
    waiting = sorted(s for s in shard_of.values() if s)[0]
    for key, pod in fake.pods.items():
        if shard_of[key] == waiting:
            pod["metadata"].setdefault("annotations", {})["redis-placer.io/shard-size"] = "4"
    binder = Binder(fake, Policy(), BinderConfig())
    binder.step(now=1000.0)
    report = binder.step(now=1001.5)
    assert sorted(d.decision for d in report.decisions) == ["allow", "wait"]
    assert len(report.bound) == 3 and len(fake.binds) == 3
    bound_shards = {shard_of[key] for key, _ in fake.binds}
    assert waiting not in bound_shards


def test_a_pod_just_bound_counts_on_its_node_before_the_watch_says_so() -> None:
    """The binding's watch event may lag; the next decision must still see the pod placed."""
    fake = _fake(shards=2)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    binder.step(now=1000.0)
    report = binder.step(now=1001.5)
    assert len(report.bound) == 6
    snapshot, ours, _ = binder._read()  # no poll: the cache only assumed the binds
    assert ours == {}
    placed = {m.key: m.pod.node_name for m in snapshot.members}
    assert placed == dict(report.bound)


class _Recording:
    """The fake adapter, noting which adapter methods the binder calls."""

    def __init__(self, inner: FakeKubeAdapter) -> None:
        self.inner = inner
        self.calls: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.calls.add(name)
        return getattr(self.inner, name)


def test_the_binder_calls_only_what_its_rbac_table_grants() -> None:
    """deploy/ RBAC is checked against COMPONENT_CALLS; this checks the table against the code."""
    from placer.kube.adapter import COMPONENT_CALLS

    for enforce in ("bind", "gate"):
        fake = _fake(shards=2)
        for pod in fake.pods.values():
            pod["metadata"]["labels"].pop("redis-role", None)  # the binder writes the roles
            if enforce == "gate":
                pod["spec"]["schedulingGates"] = [{"name": "redis-placer.io/placement"}]
                pod["spec"]["schedulerName"] = "default-scheduler"
        recording = _Recording(fake)
        binder = Binder(recording, Policy(), BinderConfig(enforce=enforce))
        first = binder.step(now=1000.0)  # gate mode pins at once: kube-scheduler is idle
        binder.cache.poll_nodes(0)
        assert len(first.bound) + len(binder.step(now=1001.5).bound) == 6, enforce
        binder.cache.poll(0)
        assert recording.calls, enforce
        allowed = set(COMPONENT_CALLS["binder"])
        assert recording.calls <= allowed, (enforce, recording.calls - allowed)


def test_an_expired_backoff_of_a_waiting_shard_does_not_spin_the_loop() -> None:
    """A shard that failed, then lost a member, waits for it: the loop sleeps, not spins."""
    from placer.kube.adapter import BindOutcome, BindResult

    fake = _fake(shards=2)
    _sized(fake, 3)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    bind = fake.bind_pod
    refuse = lambda *_: BindResult(BindOutcome.ERROR, 500, "etcdserver: timeout")  # noqa: E731
    fake.bind_pod = refuse  # type: ignore[method-assign]
    binder.step(now=1000.0)
    failed = binder.step(now=1001.5)
    assert failed.failed and failed.next_step_in == 0.0 and len(binder._retry) == 2
    key = next(k for k, p in fake.pods.items() if p["metadata"]["labels"].get("redis-shard"))
    fake.delete_pod(*key)
    fake.bind_pod = bind  # type: ignore[method-assign]
    binder.cache.poll(0)
    binder.step(now=1010.0)  # the other shard opens a batch window
    solved = binder.step(now=1011.5)
    assert sorted(d.decision for d in solved.decisions) == ["allow", "wait"]
    assert len(solved.bound) == 3 and not solved.failed
    assert solved.next_step_in > 1.0  # the waiting shard's expired backoff is no reason to wake


def test_run_places_pods_that_arrive_while_it_runs_and_stops_promptly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real loop: a watch event wakes it for pods that arrive, the enforcer's outcomes wake
    it to take them in, and a stop ends it while it sleeps.

    Nothing is timed. With nothing due the loop would sleep an hour, so each of those wake-ups
    must come from its event, not from a sleep running out; ``EVENTUALLY`` only keeps a broken
    loop from hanging the suite (on a loaded machine the rest may take tens of seconds)."""
    import threading

    hour = 3600.0
    monkeypatch.setattr("placer.binder.loop.IDLE_SECONDS", hour)
    monkeypatch.setattr("placer.binder.holding.IDLE_SECONDS", hour)
    fake = _fake(shards=2)
    later = [p for p in fake.pods.values() if p["metadata"]["labels"].get("redis-shard") == "1"]
    for pod in later:
        fake.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    reports: list[StepReport] = []
    stepped = threading.Condition()

    def on_step(report: StepReport) -> None:
        with stepped:
            reports.append(report)
            stepped.notify_all()

    def bound(count: int) -> Callable[[], bool]:
        return lambda: sum(len(r.bound) for r in reports) >= count

    def until(condition: Callable[[], bool]) -> bool:
        with stepped:
            return stepped.wait_for(condition, timeout=EVENTUALLY)

    def idle() -> bool:
        """The last step read the cluster, found nothing to decide, and sleeps the hour."""
        last = reports[-1]
        return last.read and not last.decisions and last.next_step_in == hour

    stop = threading.Event()
    loop = threading.Thread(
        target=binder.run, args=(stop,), kwargs={"on_step": on_step}, daemon=True
    )
    loop.start()
    try:
        assert until(bound(3)) and len(fake.binds) == 3
        assert until(idle)  # from now on only an event wakes it
        for pod in later:
            pod["metadata"].pop("resourceVersion", None)
            fake.add_pod(pod)
        assert until(bound(6))
        assert len(fake.binds) == 6 and len({key for key, _ in fake.binds}) == 6
        assert until(idle)
    finally:
        stop.set()
        loop.join(timeout=EVENTUALLY)
    assert not loop.is_alive()  # the stop cut its hour's sleep short
    assert binder.follow_nodes is False


@pytest.mark.parametrize(("fresh_seconds", "lists"), [(3600.0, 1), (-1.0, 2)])
def test_a_binder_lists_again_on_taking_the_lease_unless_its_first_list_is_fresh(
    fresh_seconds: float,
    lists: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A binder that takes the Lease soon after its first list decides from that list (its
    watch follows it, and it has assumed nothing): a second list of every pod and node would
    only delay its first decision. One whose list is older than ``FRESH_LIST_SECONDS`` lists
    again when it takes the Lease: it trusts nothing it saw as a standby. Either way the new
    leader labels the pods a stopped binder bound without their role label. The two bounds
    here (an hour; below zero, so any list is older) keep the test free of the machine's pace."""
    monkeypatch.setattr("placer.binder.loop.FRESH_LIST_SECONDS", fresh_seconds)
    fake = _fake(shards=1)
    # Bound by a binder that stopped before its role label went out: labelled either way.
    left = redis_pod("left-0", "left", 0, None, node=sorted(fake.nodes)[0])
    left["metadata"]["annotations"] = {ROLE_ANNOTATION: "master"}
    fake.add_pod(left)
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    listed: list[int] = []
    resync = binder.cache.resync

    def counted() -> None:
        listed.append(1)
        resync()

    binder.cache.resync = counted  # type: ignore[method-assign]
    asked: list[bool] = []

    def leading() -> bool:
        asked.append(True)
        return len(asked) > 1  # a standby at first, then the leader

    stop = threading.Event()

    def stop_once_placed(report: StepReport) -> None:
        if len(fake.binds) >= 3:
            stop.set()

    with caplog.at_level(logging.INFO, logger="placer.binder.loop"):
        loop = threading.Thread(
            target=binder.run,
            args=(stop,),
            kwargs={"leading": leading, "on_step": stop_once_placed},
            daemon=True,
        )
        loop.start()
        loop.join(timeout=EVENTUALLY)
    assert not loop.is_alive()
    assert len(fake.binds) == 3
    assert len(listed) == lists
    assert [r.message for r in caplog.records].count("deciding as the leader") == 1
    assert fake.pods[("default", "left-0")]["metadata"]["labels"]["redis-role"] == "master"


def test_members_that_arrive_while_their_shard_is_written_are_decided_on_once_it_is() -> None:
    """A shard's first member is placed alone (its size unknown); the other two arrive while
    its binding is written. The running loop decides, then takes in the writes that finished:
    the step that took this one in had passed the shard over as still in flight, and the
    write's wake-up was spent on that step, so it must ask for the next step at once, not
    sleep until something else happens (``IDLE_SECONDS``)."""
    fake = _fake(shards=2)
    later = [p for p in fake.pods.values() if p["metadata"]["labels"].get("redis-shard") == "1"]
    for pod in later:
        fake.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        pod["metadata"].pop("resourceVersion", None)
    first, *rest = later
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    binder.step(now=1000.0)
    assert len(binder.step(now=1001.5).bound) == 3
    fake.add_pod(first)
    binder.cache.poll(0)
    binder.step(now=1010.0)  # its batch window opens
    alone = binder._plan(1011.5)  # run's order: decide (and hand the batch over), then ...
    binder.enforcer.wait()  # ... while the loop sleeps, its binding is written
    assert alone.solve_status is not None and len(fake.binds) == 4
    for pod in rest:
        fake.add_pod(pod)
    binder.cache.poll(0)
    report = binder._plan(1011.6)  # the step the write woke: the shard is still in flight
    binder._finish(report, 1011.6)  # ... until the write is taken in, after the decision
    assert [d.decision for d in report.decisions] == ["allow"] and len(report.bound) == 1
    assert report.next_step_in == 0.0
    binder.step(now=1011.6)  # the next step at once: the batch window opens for the two
    assert len(binder.step(now=1013.0).bound) == 2 and len(fake.binds) == 6


def test_a_statefulset_created_after_the_binder_started_sizes_its_shard() -> None:
    """Its replicas say how many members to wait for; without them the pods would go at once."""
    from tests.kube_dicts import node, redis_pod

    fake = FakeKubeAdapter(nodes=[node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(6)])
    binder = Binder(fake, Policy(), BinderConfig(solver="greedy"))
    binder.step(now=1000.0)  # listed: no StatefulSets yet
    fake.statefulsets.append(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "late", "namespace": "default", "resourceVersion": "1"},
            # Parallel: all three come at once, so the shard is held whole (an OrderedReady
            # one makes its next pod only once this one runs: placed member by member)
            "spec": {"replicas": 3, "podManagementPolicy": "Parallel"},
        }
    )
    owner = [{"kind": "StatefulSet", "name": "late", "controller": True}]
    for i in range(2):
        pod = redis_pod(f"late-{i}", "c", 0, None, schedulerName="redis-placer")
        pod["metadata"]["ownerReferences"] = owner
        fake.add_pod(pod)
    binder.cache.poll(0)
    report = binder.step(now=1001.0)
    assert [d.decision for d in report.decisions] == ["wait"]
    assert "2 of 3" in report.decisions[0].reason and fake.binds == []


def _replica_with_no_zone_to_go() -> FakeKubeAdapter:
    """A shard of two whose replica must leave its master's zone, where the other zone's one
    node has no room: a conflict no retry resolves."""
    nodes = [node("n0", "a", "r0"), node("n1", "a", "r1"), node("n2", "b", "r2", cpu="1")]
    pods = [redis_pod(f"d-0-{k}", "d", 0, None, schedulerName="redis-placer") for k in range(2)]
    for pod in pods:
        pod["metadata"]["annotations"] = {"redis-placer.io/shard-size": "2"}
    running = redis_pod("x-0-0", "x", 0, "master", node="n2", cpu="800m")
    return FakeKubeAdapter(nodes=nodes, pods=[*pods, running])


def test_a_shard_left_out_is_explained_at_length_first_then_short_until_its_tenth_retry() -> None:
    """Explaining a conflict builds and solves a model of its own, up to two seconds ahead of
    the batch's bindings, and a shard that does not fit is retried every minute or sooner:
    its retries say it short and where the long reason was said."""
    fake = _replica_with_no_zone_to_go()
    policy = Policy.model_validate(
        {
            "rules": {"replicaSeparation": {"zone": "required"}},
            "degradation": {"relaxWhenInfeasible": False},
        }
    )
    binder = Binder(fake, policy, BinderConfig())
    binder.step(now=1000.0)
    first = binder.step(now=1001.5)
    assert len(first.unplaced) == 2
    assert all("replica-separation:zone" in reason for _, reason in first.unplaced)
    refusals: list[list[str]] = []
    now = 1001.5
    for _ in range(4 * EXPLAIN_AGAIN):
        if len(refusals) == EXPLAIN_AGAIN:
            break
        now += 61.0  # past the longest retry delay
        binder.cache.poll(0)
        report = binder.step(now=now)
        if report.unplaced:
            refusals.append([reason for _, reason in report.unplaced])
    assert len(refusals) == EXPLAIN_AGAIN
    for reasons in refusals[:-1]:
        assert len(reasons) == 2
        for reason in reasons:
            assert reason.startswith("not placed: ") and SAID_BEFORE in reason, reason
            assert "replica-separation" not in reason
    assert all("replica-separation:zone" in reason for reason in refusals[-1])
    events = [e["message"] for e in fake.events if e["reason"] == "FailedScheduling"]
    assert any(SAID_BEFORE in m for m in events)
    assert any("replica-separation:zone" in m for m in events)


def test_a_replica_count_the_statefulset_contradicts_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The binder reads no Redis, but a bitnami StatefulSet of 9 pods under the profile's
    identity.replicasPerShard 1 cannot be what redis-cli formed evenly: it logs the setting to
    change, once however many steps read it."""
    from tests import operator_shapes as shapes

    sets = shapes.bitnami("orders", nodes=9)
    pods = shapes.pods_of(sets)
    for pod in pods:
        pod["spec"]["schedulerName"] = "redis-placer"
    fake = FakeKubeAdapter(
        nodes=[node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(9)],
        pods=pods,
        statefulsets=sets,
    )
    policy = Policy.model_validate({"identity": {"profile": "bitnami"}})
    binder = Binder(fake, policy, BinderConfig(solver="greedy"))
    with caplog.at_level(logging.WARNING, logger="placer.binder.loop"):
        binder.step(now=1000.0)
        binder.cache.poll(0)
        binder.step(now=1001.5)
    warned = [r.getMessage() for r in caplog.records if "replicasPerShard" in r.getMessage()]
    assert warned == [
        "statefulset default/orders-redis-cluster: 9 pods (statefulset "
        "default/orders-redis-cluster spec.replicas) are not a multiple of 2 "
        "(identity.replicasPerShard 1 + 1): the shards are read with 1 of the 4 masters given an "
        "extra replica; if each master has 2 replicas (bitnami: the chart's cluster.replicas), "
        "set identity.replicasPerShard: 2"
    ]


def _shards(count: int, size: int = 3) -> list[dict[str, Any]]:
    """Pending shards of the binder (no role: the solver picks each master), whole."""
    return [
        redis_pod(
            f"cache-{s}-{i}",
            "cache",
            s,
            None,
            schedulerName="redis-placer",
            annotations={"redis-placer.io/shard-size": str(size)},
        )
        for s in range(count)
        for i in range(size)
    ]


def _violation_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if "violation(s) on its own pods" in r.getMessage()
    ]


def test_a_batch_that_accepts_a_violation_says_which_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One zone only: each replica must share its master's zone (preferred, so placed). The
    batch's log names what it accepted, so a run's soft violations trace to their batch."""
    fake = FakeKubeAdapter(nodes=[node(f"n{i}", "z0", f"r{i}") for i in range(6)], pods=_shards(1))
    binder = Binder(fake, Policy(), BinderConfig())
    with caplog.at_level(logging.INFO, logger="placer.binder.loop"):
        binder.step(now=1000.0)
        report = binder.step(now=1001.5)
    assert len(report.bound) == 3
    [warned] = _violation_warnings(caplog)
    assert warned.startswith(f"plan batch={report.batch} leaves ")
    assert warned.count("soft replica-separation: replica default/cache-0-") == 2
    assert "shares zone z0 with its master" in warned
    [solved] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("solve ")]
    assert solved.endswith(f" soft={warned.count('soft ')}")


def test_a_clean_batch_warns_of_nothing(caplog: pytest.LogCaptureFixture) -> None:
    nodes = [node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(9)]
    fake = FakeKubeAdapter(nodes=nodes, pods=_shards(3))
    binder = Binder(fake, Policy(), BinderConfig())
    with caplog.at_level(logging.INFO, logger="placer.binder.loop"):
        binder.step(now=1000.0)
        report = binder.step(now=1001.5)
    assert len(report.bound) == 9
    assert _violation_warnings(caplog) == []
    [solved] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("solve ")]
    assert solved.endswith(" soft=0")


def test_the_background_writes_slow_down_while_an_arrival_is_being_placed() -> None:
    """For a second after each solve the Events and labels go at their busy rate, so between
    two batches of an arrival the API server's time goes to the pods; then at full rate."""
    clock = [1000.0]
    fake = _fake()
    binder = Binder(fake, Policy(), BinderConfig(), clock=lambda: clock[0])
    assert not binder.background.busy()  # nothing solved yet
    binder.step(now=clock[0])
    clock[0] += 1.5
    assert binder.step(now=clock[0]).solve_status is not None
    assert binder.background.busy()  # its writes are done; the arrival may go on
    clock[0] += 0.9
    assert binder.background.busy()
    clock[0] += 0.2
    assert not binder.background.busy()


def test_a_stopping_binder_waits_for_its_blocked_watches_together_not_one_after_another() -> None:
    """Each watch may be blocked on the network when the binder stops; the Lease is released
    only after ``run`` returns, so all of them share one wait (WATCH_JOIN_SECONDS), not one
    each."""
    from placer.binder import loop as loop_module

    release = threading.Event()
    blocked = threading.Semaphore(0)

    class BlockedWatches(FakeKubeAdapter):
        def watch_pods(self, *args: Any, **kwargs: Any) -> Any:
            blocked.release()
            release.wait(EVENTUALLY)
            return iter(())

        def watch_nodes(self, *args: Any, **kwargs: Any) -> Any:
            blocked.release()
            release.wait(EVENTUALLY)
            return iter(())

    def stop_once_both_watches_block(_report: StepReport) -> None:
        assert blocked.acquire(timeout=EVENTUALLY) and blocked.acquire(timeout=EVENTUALLY)
        stop.set()

    objs = flatten([generate_cluster(12, 0)])
    fake = BlockedWatches(nodes=[o for o in objs if o["kind"] == "Node"], pods=[])
    binder = Binder(fake, Policy(), BinderConfig())
    joins: list[tuple[str, float | None]] = []
    join = threading.Thread.join

    def recorded(thread: threading.Thread, timeout: float | None = None) -> None:
        if thread.name in ("pod-watch", "node-watch"):
            joins.append((thread.name, timeout))
        join(thread, timeout)

    stop = threading.Event()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(threading.Thread, "join", recorded)
            binder.run(stop, on_step=stop_once_both_watches_block)
    finally:
        release.set()
    assert [name for name, _ in joins] == ["pod-watch", "node-watch"]
    first, second = (timeout for _, timeout in joins)
    assert first is not None and first <= loop_module.WATCH_JOIN_SECONDS
    assert second == 0.0  # the first wait used the whole deadline
