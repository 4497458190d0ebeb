"""The stock rules, simulated: their hard parts always hold, their preferences steer as
kube-scheduler's scores do, and on the bundled example one pod at a time loses a zone's master
majority however kube-scheduler's ties would break."""

import random
from collections import Counter
from typing import Any

from models.cluster import Node
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.commands.demo import example_path
from placer.inputs.files import snapshot_from_file
from solver.check import check_plan
from solver.stock import stock_plan
from solver.survival import survival_verdicts
from tests.kube_dicts import node, other_pod, redis_pod, snapshot


def _nodes_of(plan: Plan, snap: Snapshot) -> dict[str, Node]:
    return {a.pod: snap.node_by_name[a.node] for a in plan.assignments if a.node}


def test_members_of_a_shard_and_masters_never_share_a_host() -> None:
    nodes = [node(f"{z}{i}", z, f"{z}{i}") for z in "abc" for i in range(3)]
    pods = [redis_pod(f"r-{s}-{m}", "r", s, None) for s in range(6) for m in range(3)]
    snap = snapshot(nodes, pods)
    plan = stock_plan(snap, Policy())
    assert not plan.unplaced
    hard = [v for v in check_plan(snap, Policy(), plan) if v.severity == "hard"]
    assert hard == []
    placed = _nodes_of(plan, snap)
    masters = Counter(placed[a.pod].name for a in plan.assignments if a.role == "master")
    assert max(masters.values()) == 1


def test_masters_spread_over_zones_and_replicas_leave_their_masters_zone() -> None:
    """Symmetric zones: the zone spread puts one master in each; the preferred anti-affinity
    sends each replica out of its master's zone."""
    nodes = [node(f"{z}{i}", z, f"{z}{i}") for z in "abc" for i in range(2)]
    pods = [redis_pod(f"r-{s}-{m}", "r", s, None) for s in range(3) for m in range(2)]
    snap = snapshot(nodes, pods)
    plan = stock_plan(snap, Policy())
    placed = _nodes_of(plan, snap)
    master_zones = sorted(str(placed[a.pod].zone) for a in plan.assignments if a.role == "master")
    assert master_zones == ["a", "b", "c"]
    for shard in range(3):
        zones = {placed[f"default/r-{shard}-{m}"].zone for m in range(2)}
        assert len(zones) == 2


def test_a_pod_no_node_takes_is_left_pending() -> None:
    snap = snapshot(
        [node("a1", "a", "a1", memory="1Gi")], [redis_pod("r-0-0", "r", 0, None, memory="2Gi")]
    )
    plan = stock_plan(snap, Policy())
    assert [u.pod for u in plan.unplaced] == ["default/r-0-0"]


def test_on_the_bundled_example_every_tie_break_loses_a_zone_majority() -> None:
    """kube-scheduler picks at random among equal scores: the demo's claim holds for any pick."""
    policy = Policy()
    snap = snapshot_from_file(example_path(), policy)
    outcomes: Counter[bool] = Counter()
    for seed in range(60):
        rng = random.Random(seed)
        plan = stock_plan(snap, policy, lambda nodes, rng=rng: rng.choice(nodes))  # type: ignore[misc]
        assert not plan.unplaced
        zone = next(v for v in survival_verdicts(snap, policy, plan) if v.level == "zone")
        outcomes[zone.survived] += 1
        assert any(t.cluster == "redis/sessions" and t.majority_lost for t in zone.takes)
    assert outcomes == {False: 60}


def spread_rounding_cluster() -> list[dict[str, Any]]:
    """One master to place where PodTopologySpread's rounding decides: its cluster's masters
    per zone a 1, b 3, c 0 (raw scores round(n * log 5): 2, 5, 0), against room (a1 far
    emptier than c0). tests/e2e/test_stock_simulation_e2e.py places it on a real scheduler."""
    nodes = [
        node(name, f"zone-{name[0]}", f"{name[0]}-r{rack}", cpu="8", memory="32Gi")
        for name, rack in (("a0", 1), ("a1", 0), ("a2", 0), ("b0", 1), ("b1", 0), ("b2", 1))
    ]
    nodes.append(node("c0", "zone-c", "c-r0", cpu="8", memory="32Gi"))
    others = [("a2", "4", "23Gi"), ("b0", "5", "5Gi"), ("b1", "7", "3Gi"), ("b2", "2", "6Gi")]
    others.append(("c0", "6", "14Gi"))
    running = [
        ("0", "master", "b1"), ("0", "replica", "a1"), ("1", "master", "b2"),
        ("1", "replica", "c0"), ("2", "master", "b1"), ("2", "replica", "a0"),
        ("3", "master", "a0"), ("3", "replica", "b2"),
    ]  # fmt: skip
    pods = [other_pod(f"other-{host}", host, cpu, memory) for host, cpu, memory in others]
    pods += [redis_pod(f"r-{s}-{role}", "r", s, role, host) for s, role, host in running]
    pods.append(redis_pod("r-4-0", "r", 4, None))
    return [*nodes, *pods]


def test_the_zone_spread_is_scored_in_kube_schedulers_integers() -> None:
    """kube-scheduler 1.36 binds this master to c0 every time (the e2e test). Its spread score
    rounds before normalising: a1's zone scores 100 * (5 + 0 - 2) // 5 = 60, not the 66 of
    unrounded counts, and the 12 points a1 loses at weight 2 are the 6 it led c0 by."""
    snap = snapshot(
        [o for o in spread_rounding_cluster() if o["kind"] == "Node"],
        [o for o in spread_rounding_cluster() if o["kind"] == "Pod"],
    )
    plan = stock_plan(snap, Policy())
    assert [(a.pod, a.node, a.role) for a in plan.assignments if a.action == "place"] == [
        ("default/r-4-0", "c0", "master")
    ]
