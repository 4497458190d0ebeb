"""A node-pool upgrade under way: evicted pods go to the zone's new nodes, not to the old ones
it drains next, and never to a node cordoned or tainted for disruption."""

from typing import Any

import pytest

from models.cluster import Node
from models.maintenance import kubelet_release, superseded_nodes
from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import check_plan, evaluate_objective, final_placement
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot
from tests.test_check import make_policy

POOL = "cloud.google.com/gke-nodepool"


def versioned(name: str, zone: str, version: str, **kw: Any) -> dict[str, Any]:
    obj = node(name, zone, name, **kw)
    obj["status"]["nodeInfo"] = {"kubeletVersion": version}
    return obj


def bare(name: str, version: str, pool: str | None = None, ready: bool = True) -> Node:
    return Node(
        name=name,
        labels={POOL: pool} if pool else {},
        kubelet_version=version,
        ready=ready,
        zone="a",
    )


def test_releases_are_read_with_their_vendor_suffixes() -> None:
    assert kubelet_release("v1.36.2-eks-1a2b3c") == (1, 36, 2)
    assert kubelet_release("v1.30.10+k3s1") == (1, 30, 10)
    assert kubelet_release("") is None
    assert kubelet_release("unknown") is None


def test_a_pool_with_a_newer_ready_node_supersedes_its_older_ones() -> None:
    nodes = [
        bare("old-1", "v1.35.4", "p"),
        bare("old-2", "v1.35.4", "p"),
        bare("new-1", "v1.36.2", "p"),
        bare("other-pool", "v1.34.0", "q"),  # its own pool, of one release
        bare("no-version", "", "p"),  # nothing to compare
    ]
    assert superseded_nodes(nodes) == {"old-1", "old-2"}


def test_nothing_is_superseded_by_a_node_not_ready_or_in_a_pool_of_one_release() -> None:
    assert superseded_nodes([bare("a", "v1.35.0"), bare("b", "v1.36.0", ready=False)]) == set()
    assert superseded_nodes([bare("a", "v1.36.0"), bare("b", "v1.36.0")]) == set()
    # Without pool labels the cluster is one pool.
    assert superseded_nodes([bare("a", "v1.35.0"), bare("b", "v1.36.0")]) == {"a"}


def upgrade_under_way(pool_b_new: bool = False) -> Snapshot:
    """Zone a: old node a-old (v1.35, roomy) and new node a-new (v1.36); zone b one node. A
    shard's master runs in zone b; its replica, evicted from zone a, is pending."""
    nodes = [
        versioned("a-old", "a", "v1.35.4", memory="64Gi"),
        versioned("a-new", "a", "v1.36.2", memory="16Gi"),
        versioned("b1", "b", "v1.36.2" if pool_b_new else "v1.35.4"),
        versioned("b2", "b", "v1.36.2" if pool_b_new else "v1.35.4"),
    ]
    pods = [
        redis_pod("m", "c", 0, "master", node="b1"),
        redis_pod("r", "c", 0, "replica"),
        redis_pod("m1", "c", 1, "master", node="b2"),
        redis_pod("r1", "c", 1, "replica", node="a-old"),
    ]
    return snapshot(nodes, pods)


def test_an_evicted_pod_goes_to_its_zones_new_node() -> None:
    """CP-SAT's plan (greedy, the fallback, does not price it: the most free memory wins)."""
    snap = upgrade_under_way()
    assert snap.superseded == {"a-old", "b1", "b2"}
    policy = Policy()
    plan = solve(snap, policy, options=SolveOptions(time_limit=10))
    assert not [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    assert final_placement(snap, plan)["default/r"][0] == "a-new"


def test_without_the_weight_memory_balance_takes_the_old_node() -> None:
    """The old node is four times the size: with weights.superseded 0 it is the emptier."""
    snap = upgrade_under_way()
    plan = solve(snap, make_policy(weights={"superseded": 0}), options=SolveOptions(time_limit=10))
    assert final_placement(snap, plan)["default/r"][0] == "a-old"


def test_the_checker_counts_members_on_superseded_nodes() -> None:
    snap = upgrade_under_way()
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=10))
    # m and m1 on b1, b2 and r1 on a-old stay on superseded nodes; r goes to a-new.
    assert evaluate_objective(snap, Policy(), plan)["superseded"] == 5 * 3


def test_a_zone_with_only_old_nodes_keeps_its_pod() -> None:
    """superseded is below memberSpread: leaving the zone for a new node costs more than an old
    node in it."""
    nodes = [
        versioned("a-old", "a", "v1.35.4"),
        versioned("b-new", "b", "v1.36.2"),
        versioned("c-old", "c", "v1.35.4"),
        versioned("c-old2", "c", "v1.35.4"),
    ]
    pods = [
        redis_pod("m0", "c", 0, "master", node="c-old"),
        redis_pod("r0", "c", 0, "replica"),  # it ran in zone a
        redis_pod("m1", "c", 1, "master", node="b-new"),
        redis_pod("r1", "c", 1, "replica", node="c-old2"),
    ]
    snap = snapshot(nodes, pods)
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=10))
    assert final_placement(snap, plan)["default/r0"][0] == "a-old"


@pytest.mark.parametrize(
    "how",
    [
        {"unschedulable": True},
        {"taints": ["ToBeDeletedByClusterAutoscaler=1:NoSchedule"]},
        {"taints": ["karpenter.sh/disrupted:NoSchedule"]},
    ],
)
def test_a_node_going_takes_no_pod_even_one_tolerating_every_taint(how: dict[str, Any]) -> None:
    nodes = [node("a1", "a", "a1", **how), node("a2", "a", "a2"), node("b1", "b", "b1")]
    pods = [
        redis_pod("m", "c", 0, "master", node="b1"),
        redis_pod("r", "c", 0, "replica", tolerations=[{"operator": "Exists"}]),
    ]
    snap = snapshot(nodes, pods)
    for plan in (greedy_plan(snap, Policy()), solve(snap, Policy())):
        assert final_placement(snap, plan)["default/r"][0] == "a2"
