"""placer.rebalance.failover: the rebalance executor, with real Redis for failovers.

The Kubernetes side (evict, relabel, shard health) is injected as plain callables:
that is the executor's seam, not a mock of Redis.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from placer.rebalance.failover import (
    EvictOutcome,
    ExecutionReport,
    FailoverStep,
    MoveStep,
    RebalanceExecutor,
)
from placer.redis.ops import RedisEndpoint, cluster_info

if TYPE_CHECKING:  # imported for real by pytest_plugins, so asserts get rewritten
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]

CLUSTER = "redis/cache"
KEYS = 1000


def pod(ip: str) -> str:
    """The pod key we pretend runs at ``ip`` (127.0.0.5 -> redis/cache-5)."""
    return f"redis/cache-{ip.rsplit('.', 1)[1]}"


def step(h: RedisClusterHarness, shard: str, from_ip: str, to_ip: str) -> FailoverStep:
    return FailoverStep(
        cluster=CLUSTER,
        shard=shard,
        from_pod=pod(from_ip),
        to_pod=pod(to_ip),
        from_endpoint=h.endpoint(from_ip),
        to_endpoint=h.endpoint(to_ip),
    )


class KubeSide:
    """Records what the executor asked of Kubernetes; answers from a script."""

    def __init__(
        self,
        healthy: dict[str, int] | None = None,
        outcomes: dict[str, EvictOutcome] | None = None,
    ) -> None:
        self.healthy = healthy or {}
        self.outcomes = outcomes or {}
        self.evicted: list[str] = []
        self.relabelled: list[tuple[str, str]] = []
        self.stood: list[str] = []
        self.marked: list[tuple[str, str]] = []
        """(``started`` or ``finished``, the master's pod) as the guard's marks go."""

    def evict(self, pod_key: str) -> EvictOutcome:
        self.evicted.append(pod_key)
        return self.outcomes.get(pod_key, EvictOutcome(status="evicted"))

    def shard_healthy_members(self, shard_key: str) -> int:
        return self.healthy.get(shard_key, 2)

    def relabel(self, pod_key: str, role: str) -> None:
        self.relabelled.append((pod_key, role))

    def elected(self, step: FailoverStep) -> None:
        self.stood.append(step.to_pod)

    def starting(self, step: FailoverStep) -> None:
        self.marked.append(("started", step.from_pod))

    def finished(self, step: FailoverStep) -> None:
        self.marked.append(("finished", step.from_pod))

    def executor(self, **options: float | int | None) -> RebalanceExecutor:
        return RebalanceExecutor(
            evict=self.evict,
            shard_healthy_members=self.shard_healthy_members,
            relabel=self.relabel,
            elected=self.elected,
            starting=self.starting,
            finished=self.finished,
            **options,  # type: ignore[arg-type]
        )


def outcomes(report: ExecutionReport, kind: str) -> list[tuple[str, str]]:
    return [(a.target, a.outcome) for a in report.actions if a.kind == kind]


def assert_all_nodes_agree(h: RedisClusterHarness, expected: dict[str, str]) -> None:
    """After settling, every node's own view shows ``expected`` and cluster_state:ok."""
    h.wait_healthy()
    for ip in h.ips:
        assert h.layout(ip) == expected, ip
        assert cluster_info(h.endpoint(ip))["cluster_state"] == "ok", ip


# -- real Redis ---------------------------------------------------------------------------


@pytest.mark.redis
def test_promotes_two_replicas_without_losing_a_key(redis_cluster: RedisClusterHarness) -> None:
    h = redis_cluster
    with h.cluster_client() as rc:
        pipe = rc.pipeline()
        for i in range(KEYS):
            pipe.set(f"key:{i}", f"value-{i}")
        pipe.execute()
    before = h.layout()
    (m1, r1), (m2, r2), (m3, r3) = before.items()
    steps = [step(h, "0", m1, r1), step(h, "1", m2, r2)]
    kube = KubeSide()

    report = kube.executor(failover_timeout_s=20).run(steps, [])

    assert outcomes(report, "failover") == [(pod(r1), "ok"), (pod(r2), "ok")]
    assert report.ok and report.count("failover", "ok") == 2
    assert kube.stood == [pod(r1), pod(r2)]  # Redis's election timers start: told, to mark them
    # each failover marked under way on its master before it is sent, and ended after
    assert kube.marked == [
        ("started", pod(m1)),
        ("finished", pod(m1)),
        ("started", pod(m2)),
        ("finished", pod(m2)),
    ]
    assert set(kube.relabelled) == {
        (pod(r1), "master"),
        (pod(m1), "replica"),
        (pod(r2), "master"),
        (pod(m2), "replica"),
    }
    # Promoted replicas lead, old masters follow them, the third shard is untouched.
    assert_all_nodes_agree(h, {r1: m1, r2: m2, m3: r3})
    with h.cluster_client() as rc:
        values = [rc.get(f"key:{i}") for i in range(KEYS)]
    assert values == [f"value-{i}" for i in range(KEYS)]  # 0 lost, 0 changed
    assert sum(h.client(ip).dbsize() for ip in (r1, r2, m3)) == KEYS

    roundtrip = ExecutionReport.model_validate_json(report.to_json())
    assert roundtrip == report
    assert json.loads(report.to_json())["actions"][0]["kind"] == "failover"

    # Re-running the same plan is safe: both steps are recognised as done.
    again = kube.executor(failover_timeout_s=20).run(steps, [])
    assert outcomes(again, "failover") == [(pod(r1), "skipped"), (pod(r2), "skipped")]
    assert all("already done" in a.reason for a in again.actions if a.kind == "failover")
    assert len(kube.marked) == 4  # nothing sent, nothing marked
    assert_all_nodes_agree(h, {r1: m1, r2: m2, m3: r3})


@pytest.mark.redis
def test_failure_stops_only_its_own_shard(redis_cluster: RedisClusterHarness) -> None:
    h = redis_cluster
    before = h.layout()
    (m1, r1), (m2, r2), (m3, r3) = before.items()
    h.cut_replication_link(r1)  # shard 0's replica cannot catch up
    kube = KubeSide()
    moves = [
        MoveStep(pod=pod(m1), shard_key=f"{CLUSTER}/0", node_from="n1", node_to="n4"),
        MoveStep(pod=pod(m2), shard_key=f"{CLUSTER}/1", node_from="n2", node_to="n5"),
    ]
    try:
        report = kube.executor(failover_timeout_s=20, max_moves=5).run(
            [step(h, "0", m1, r1), step(h, "0", m1, r1), step(h, "1", m2, r2)], moves
        )
    finally:
        h.heal_replication_link(r1)

    first, second, third = (a for a in report.actions if a.kind == "failover")
    assert first.outcome == "failed" and "replication link" in first.reason
    assert f"{r1}:{h.port}" in first.reason
    assert second.outcome == "skipped" and "earlier failover step" in second.reason
    assert third.outcome == "ok" and third.shard == f"{CLUSTER}/1"
    # The failed shard's member is not evicted; the healthy shard's move goes ahead.
    assert outcomes(report, "evict") == [(pod(m1), "skipped"), (pod(m2), "ok")]
    assert kube.evicted == [pod(m2)]
    assert not report.ok
    # the failed failover was sent, and its end is marked as a performed one's
    assert kube.marked[:2] == [("started", pod(m1)), ("finished", pod(m1))]
    assert_all_nodes_agree(h, {m1: r1, r2: m2, m3: r3})


@pytest.mark.redis
def test_failover_timeout_is_recorded_and_cluster_stays_ok(
    redis_cluster: RedisClusterHarness,
) -> None:
    h = redis_cluster
    before = h.layout()
    (m1, r1), (m2, r2), (m3, r3) = before.items()
    kube = KubeSide()
    # No failover can settle in zero seconds: the wait must give up and say so.
    report = kube.executor(failover_timeout_s=0.0).run(
        [step(h, "0", m1, r1), step(h, "0", r1, m1)],
        [MoveStep(pod=pod(m1), shard_key=f"{CLUSTER}/0", node_from="n1", node_to="n4")],
    )
    timed_out, later = (a for a in report.actions if a.kind == "failover")
    assert timed_out.outcome == "failed" and "did not complete within 0s" in timed_out.reason
    assert later.outcome == "skipped"
    assert outcomes(report, "evict") == [(pod(m1), "skipped")] and kube.evicted == []
    assert kube.relabelled == []  # labels follow only confirmed failovers
    # Redis still honours the accepted request: shard 0 lands swapped, the other
    # shards never moved, and every node ends healthy with cluster_state:ok.
    h.wait_layout({r1: m1, m2: r2, m3: r3})
    assert_all_nodes_agree(h, {r1: m1, m2: r2, m3: r3})


@pytest.mark.redis
def test_unreachable_target_changes_nothing(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    m1, _ = next(iter(before.items()))
    ghost = step(h, "0", m1, "127.0.0.9").model_copy(
        update={"to_endpoint": RedisEndpoint(host="127.0.0.9", port=h.port)}
    )
    kube = KubeSide()
    report = kube.executor(io_timeout_s=1.0).run(
        [ghost], [MoveStep(pod=pod(m1), shard_key=f"{CLUSTER}/0", node_from="a", node_to="b")]
    )
    fail = report.actions[0]
    assert fail.outcome == "failed"
    assert "unreachable" in fail.reason and f"127.0.0.9:{h.port}" in fail.reason
    assert outcomes(report, "evict") == [(pod(m1), "skipped")] and kube.evicted == []
    assert h.layout() == before


@pytest.mark.redis
def test_stale_plan_is_skipped(redis_cluster_shared: RedisClusterHarness) -> None:
    h = redis_cluster_shared
    before = h.layout()
    (m1, r1), (m2, _), _ = before.items()
    unknown = step(h, "2", m1, r1).model_copy(
        update={"from_endpoint": RedisEndpoint(host="127.0.0.9", port=h.port)}
    )
    kube = KubeSide()
    report = kube.executor().run([step(h, "0", m2, r1), unknown], [])
    wrong_master, not_a_node = report.actions
    assert wrong_master.outcome == "skipped" and "stale plan" in wrong_master.reason
    assert h.node_id(m1) in wrong_master.reason  # says whose replica it really is
    assert not_a_node.outcome == "skipped" and "is not a cluster node" in not_a_node.reason
    assert report.ok and kube.relabelled == []
    assert h.layout() == before


# -- Kubernetes-side rules (no Redis involved: only evictions) ----------------------------


def moves_for(*pairs: tuple[str, str]) -> list[MoveStep]:
    return [MoveStep(pod=p, shard_key=s, node_from="old", node_to="new") for p, s in pairs]


def test_pdb_refusal_is_a_skip_with_reason() -> None:
    kube = KubeSide(outcomes={"ns/a-0": EvictOutcome(status="blocked", reason="PDB redis-a")})
    report = kube.executor(max_moves=5).run([], moves_for(("ns/a-0", "a"), ("ns/b-0", "b")))
    refused, done = report.actions
    assert refused.outcome == "skipped"
    assert "PodDisruptionBudget" in refused.reason and "PDB redis-a" in refused.reason
    assert done.outcome == "ok" and kube.evicted == ["ns/a-0", "ns/b-0"]
    assert report.ok


def test_never_evicts_a_shards_last_healthy_member() -> None:
    kube = KubeSide(healthy={"a": 1, "b": 0, "c": 2})
    report = kube.executor(max_moves=5).run(
        [], moves_for(("ns/a-0", "a"), ("ns/b-0", "b"), ("ns/c-0", "c"))
    )
    assert outcomes(report, "evict") == [
        ("ns/a-0", "skipped"),
        ("ns/b-0", "skipped"),
        ("ns/c-0", "ok"),
    ]
    assert all("never evict the last" in a.reason for a in report.actions[:2])
    assert kube.evicted == ["ns/c-0"]


def test_max_moves_is_respected() -> None:
    kube = KubeSide()
    pairs = [(f"ns/p-{i}", f"shard-{i}") for i in range(5)]
    report = kube.executor(max_moves=2).run([], moves_for(*pairs))
    assert kube.evicted == ["ns/p-0", "ns/p-1"]
    assert report.count("evict", "ok") == 2 and report.count("evict", "skipped") == 3
    assert all("max-moves limit (2)" in a.reason for a in report.actions[2:])


def test_refused_evictions_do_not_use_up_max_moves() -> None:
    kube = KubeSide(
        outcomes={
            "ns/p-0": EvictOutcome(status="blocked", reason="PDB"),
            "ns/p-1": EvictOutcome(status="gone"),
        }
    )
    pairs = [(f"ns/p-{i}", f"shard-{i}") for i in range(4)]
    report = kube.executor(max_moves=1).run([], moves_for(*pairs))
    assert outcomes(report, "evict") == [
        ("ns/p-0", "skipped"),
        ("ns/p-1", "skipped"),
        ("ns/p-2", "ok"),
        ("ns/p-3", "skipped"),
    ]
    assert "no longer exists" in report.actions[1].reason


def test_one_member_of_a_shard_at_a_time() -> None:
    kube = KubeSide(healthy={"a": 3})
    evict_and_drop: Callable[[str], EvictOutcome] = kube.evict

    def evict(pod_key: str) -> EvictOutcome:
        kube.healthy["a"] -= 1  # the evicted pod is gone until the binder recreates it
        return evict_and_drop(pod_key)

    kube.evict = evict  # type: ignore[method-assign]
    report = kube.executor(max_moves=5).run([], moves_for(("ns/a-0", "a"), ("ns/a-1", "a")))
    assert outcomes(report, "evict") == [("ns/a-0", "ok"), ("ns/a-1", "skipped")]
    assert "one member at a time" in report.actions[1].reason
    assert kube.evicted == ["ns/a-0"]


def test_second_member_goes_once_the_first_is_back() -> None:
    kube = KubeSide(healthy={"a": 3})
    calls = {"n": 0}

    def healthy(shard_key: str) -> int:
        calls["n"] += 1
        # 3 before the first eviction, 2 right after, 3 again on the next poll.
        return {1: 3, 2: 2}.get(calls["n"], 3)

    executor = RebalanceExecutor(
        evict=kube.evict,
        shard_healthy_members=healthy,
        max_moves=5,
        settle_timeout_s=5.0,
        poll_s=0.01,
    )
    report = executor.run([], moves_for(("ns/a-0", "a"), ("ns/a-1", "a")))
    assert outcomes(report, "evict") == [("ns/a-0", "ok"), ("ns/a-1", "ok")]
    assert calls["n"] == 3 and kube.evicted == ["ns/a-0", "ns/a-1"]


def test_eviction_errors_are_recorded_and_the_run_goes_on() -> None:
    kube = KubeSide(outcomes={"ns/a-0": EvictOutcome(status="error", reason="HTTP 500")})

    def health(shard_key: str) -> int:
        if shard_key == "b":
            raise RuntimeError("api down")
        return 2

    executor = RebalanceExecutor(evict=kube.evict, shard_healthy_members=health, max_moves=5)
    report = executor.run([], moves_for(("ns/a-0", "a"), ("ns/b-0", "b"), ("ns/c-0", "c")))
    assert outcomes(report, "evict") == [
        ("ns/a-0", "failed"),
        ("ns/b-0", "failed"),
        ("ns/c-0", "ok"),
    ]
    assert "HTTP 500" in report.actions[0].reason
    assert "cannot tell shard health" in report.actions[1].reason
    assert kube.evicted == ["ns/a-0", "ns/c-0"]  # no eviction without a health answer
    assert not report.ok


def test_max_failovers_defers_the_rest_without_touching_redis() -> None:
    # Endpoints that would be unreachable: with the limit at 0 they are never contacted.
    dead = RedisEndpoint(host="127.0.0.9", port=1)
    steps = [
        FailoverStep(
            cluster=CLUSTER,
            shard=str(i),
            from_pod=f"ns/m-{i}",
            to_pod=f"ns/r-{i}",
            from_endpoint=dead,
            to_endpoint=dead,
        )
        for i in range(2)
    ]
    kube = KubeSide()
    report = kube.executor(max_failovers=0, max_moves=5).run(
        steps, moves_for(("ns/m-0", f"{CLUSTER}/0"), ("ns/x-0", "other"))
    )
    assert outcomes(report, "failover") == [("ns/r-0", "skipped"), ("ns/r-1", "skipped")]
    assert all("max-failovers limit (0)" in a.reason for a in report.actions[:2])
    # A move in a shard whose failover was deferred waits too; others go ahead.
    assert outcomes(report, "evict") == [("ns/m-0", "skipped"), ("ns/x-0", "ok")]
    assert report.ok


def test_a_failover_redis_would_hold_back_is_skipped_untouched() -> None:
    """A step whose replica stood for election lately (``held``): sent, CLUSTER FAILOVER would
    pause its master's writes until Redis's timer ends. It is skipped with the reason, Redis
    never contacted, and that shard's moves wait with it."""
    dead = RedisEndpoint(host="127.0.0.9", port=1)
    why = "Redis lets ns/r-0 stand for election again at 10:00:20Z"
    steps = [
        FailoverStep(
            cluster=CLUSTER,
            shard="0",
            from_pod="ns/m-0",
            to_pod="ns/r-0",
            from_endpoint=dead,
            to_endpoint=dead,
            held=why,
        )
    ]
    kube = KubeSide()
    report = kube.executor(max_moves=5).run(steps, moves_for(("ns/m-0", f"{CLUSTER}/0")))
    assert outcomes(report, "failover") == [("ns/r-0", "skipped")]
    assert report.actions[0].reason == why
    assert outcomes(report, "evict") == [("ns/m-0", "skipped")]
    assert kube.stood == [] and report.ok


def test_rebalance_reads_redis_s_election_timers_from_the_pods() -> None:
    """The guard (or an earlier run) failed shard 0 over moments ago and marked its pods: this
    run's failover there waits for the next run rather than pause the master's writes."""
    import time

    from models.policy import Policy
    from placer.kube.fake import FakeKubeAdapter
    from placer.rebalance.apply import apply_changes
    from placer.redis.access import Dialer
    from placer.redis.elections import marks
    from tests.kube_dicts import node, redis_pod, snapshot

    pods = [
        redis_pod("s0-a", "cache", 0, "master", node="n1"),
        redis_pod("s0-b", "cache", 0, "replica", node="n2"),
    ]
    for pod in pods:  # no Redis answers there: a failover sent would fail, not skip
        pod["status"] = {"phase": "Running", "podIP": "127.0.0.9"}
    stood, _ = marks(5.0, time.time())
    pods[1]["metadata"]["annotations"] = {**pods[1]["metadata"].get("annotations", {}), **stood}
    nodes = [node("n1", "za", "ra"), node("n2", "zb", "rb")]
    snap = snapshot(nodes, pods, Policy())
    report = apply_changes(
        snap,
        Policy(),
        [{"kind": "failover", "from": "default/s0-a", "to": "default/s0-b"}],
        adapter=FakeKubeAdapter(nodes=nodes, pods=pods),
        dial=Dialer(port=1),
        relabel=False,
        role_values={},
        max_failovers=None,
        max_moves=0,
        failover_timeout=1.0,
    )
    (action,) = report["actions"]
    assert action["outcome"] == "skipped"
    assert action["reason"].startswith("Redis lets default/s0-b stand for election again at ")


@pytest.mark.redis
def test_rebalance_marks_its_failover_on_the_master_for_the_guard(
    redis_cluster: RedisClusterHarness,
) -> None:
    """``rebalance --apply`` fails shard 0 over: the master's pod says the failover is under way
    before it is sent (every replica of the guard then lets no member of the shard stop) and
    when it ended, beside Redis's election timers."""
    import time

    from models.policy import Policy
    from placer.kube.fake import FakeKubeAdapter
    from placer.rebalance.apply import apply_changes
    from placer.redis.access import Dialer
    from placer.redis.elections import FAILOVER_UNTIL, NO_ELECTION_UNTIL, NO_VOTES_UNTIL
    from tests.kube_dicts import node, redis_pod, snapshot

    h = redis_cluster
    master, replica = sorted(h.layout().items())[0]
    pods = []
    for name, ip, role, where in (
        ("s0-m", master, "master", "n1"),
        ("s0-r", replica, "replica", "n2"),
    ):
        obj = redis_pod(name, "cache", 0, role, node=where)
        obj["status"].update(podIP=ip, conditions=[{"type": "Ready", "status": "True"}])
        pods.append(obj)
    nodes = [node("n1", "za", "ra"), node("n2", "zb", "rb")]
    kube = FakeKubeAdapter(nodes=nodes, pods=pods)
    seen: list[str | None] = []
    annotate = kube.annotate_pod

    def watched(namespace: str, name: str, annotations: Any) -> Any:
        seen.append(annotations.get(FAILOVER_UNTIL))
        return annotate(namespace, name, annotations)

    kube.annotate_pod = watched  # type: ignore[method-assign,assignment]
    report = apply_changes(
        snapshot(nodes, pods, Policy()),
        Policy(),
        [{"kind": "failover", "from": "default/s0-m", "to": "default/s0-r"}],
        adapter=kube,
        dial=Dialer(port=h.port),
        relabel=False,
        role_values={},
        max_failovers=None,
        max_moves=0,
        failover_timeout=20.0,
    )
    assert [a["outcome"] for a in report["actions"]] == ["ok"]
    stamps = [s for s in seen if s is not None]
    assert len(stamps) == 2  # under way until its timeout, then when it ended
    start, end = (time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")) for s in stamps)
    assert start - end >= 15  # the timeout's end (20 s on), then the end itself
    marked = kube.pods[("default", "s0-m")]["metadata"]["annotations"]
    assert marked[FAILOVER_UNTIL] == stamps[1] and NO_VOTES_UNTIL in marked
    assert NO_ELECTION_UNTIL in kube.pods[("default", "s0-r")]["metadata"]["annotations"]
    h.wait_healthy()
