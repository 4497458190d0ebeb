"""member-spread: a pod that comes back goes to the zone it left, so failovers alone can put the
masters back (a rollout or a drain empties no zone).

Six shards of a master and a replica on two nodes per zone, four members and two masters in
each zone. The replica that left zone a is pending again; zone a is the fullest in memory, so
without memberSpread the plan has no reason to send it back there.
"""

from collections import Counter

import pytest

from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import check_plan, evaluate_objective, final_placement
from solver.greedy import greedy_placement, greedy_plan
from solver.solve import SolveOptions, solve
from tests.bruteforce import brute_force_optimum
from tests.kube_dicts import node, other_pod, redis_pod, snapshot
from tests.test_check import make_policy

ZONES = ("a", "b", "c")
#  shard: (master's node, replica's node); two masters and four members per zone
LAYOUT = {
    0: ("a1", "b1"),
    1: ("a2", "c1"),
    2: ("b1", "c2"),
    3: ("b2", "a1"),
    4: ("c1", "a2"),
    5: ("c2", "b2"),
}


OTHER = {"a": "6Gi", "b": "1Gi", "c": "1Gi"}
"""Other pods' memory per node, by zone: zone a is the fullest."""


def rolled(left: int = 3) -> Snapshot:
    """Shard ``left``'s replica (it ran in zone a) is pending again; zone a's nodes carry 6Gi of
    other pods, the rest 1Gi."""
    nodes = [node(f"{z}{i}", z, f"{z}{i}", memory="16Gi") for z in ZONES for i in (1, 2)]
    pods = []
    for shard, (master, replica) in LAYOUT.items():
        pods.append(redis_pod(f"m{shard}", "c", shard, "master", node=master))
        pods.append(
            redis_pod(f"r{shard}", "c", shard, "replica", node=None if shard == left else replica)
        )
    pods += [other_pod(f"o-{z}{i}", f"{z}{i}", "100m", OTHER[z]) for z in ZONES for i in (1, 2)]
    return snapshot(nodes, pods)


def zone_of_returning(snap: Snapshot, policy: Policy, solver: str) -> str:
    if solver == "greedy":
        plan = greedy_plan(snap, policy)
    else:
        plan = solve(snap, policy, options=SolveOptions(time_limit=10))
    assert not [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    name = final_placement(snap, plan)["default/r3"][0]
    assert name is not None
    zone = snap.node_by_name[name].zone
    assert zone is not None
    return zone


@pytest.mark.parametrize("solver", ["cp-sat", "greedy"])
def test_a_returning_replica_goes_back_to_the_zone_it_left(solver: str) -> None:
    assert zone_of_returning(rolled(), Policy(), solver) == "a"


def test_without_member_spread_it_would_leave_its_zone_empty_of_it() -> None:
    """The same input with the weight at 0: memory balance alone sends it to zone b or c
    (what the binder did before), which is what the term is there to prevent."""
    assert zone_of_returning(rolled(), make_policy(weights={"memberSpread": 0}), "cp-sat") != "a"


def test_every_member_rolled_in_turn_keeps_four_per_zone() -> None:
    """A whole rollout, one pod at a time (each master handed over first, so every returning
    pod is a replica): the zones still hold four members each at the end, though zone a is the
    fullest in memory."""
    policy = Policy()
    placed = dict(LAYOUT)
    roles = {s: ("master", "replica") for s in LAYOUT}
    for shard in sorted(LAYOUT, reverse=True):
        for index in (1, 0):  # the replica, then (after a failover) the former master
            if index == 0:  # the handover: the member that stays is the master now
                roles[shard] = ("replica", "master")
            nodes = [node(f"{z}{i}", z, f"{z}{i}", memory="16Gi") for z in ZONES for i in (1, 2)]
            pods = []
            for s, pair in placed.items():
                for i, where in enumerate(pair):
                    gone = s == shard and i == index
                    role = "replica" if gone else roles[s][i]
                    pods.append(redis_pod(f"p{s}-{i}", "c", s, role, node=None if gone else where))
            pods += [
                other_pod(f"o-{z}{i}", f"{z}{i}", "100m", OTHER[z]) for z in ZONES for i in (1, 2)
            ]
            snap = snapshot(nodes, pods)
            plan = solve(snap, policy, options=SolveOptions(time_limit=10))
            key = f"default/p{shard}-{index}"
            # A handover may stack two masters on a node (what runs); the returning pod adds
            # no hard violation.
            hard = [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
            assert not [v for v in hard if key in v.pods]
            name = final_placement(snap, plan)[key][0]
            assert name is not None
            placed[shard] = (name, placed[shard][1]) if index == 0 else (placed[shard][0], name)
    members = Counter(where[0] for pair in placed.values() for where in pair)
    assert members == {"a": 4, "b": 4, "c": 4}


def test_tiny_case_matches_the_brute_force_optimum() -> None:
    """Two zones, a running shard of two and a pending one: the plan's objective (the checker's
    count, memberSpread included) equals the exhaustive search's."""
    nodes = [node("a1", "a", "a1"), node("a2", "a", "a2"), node("b1", "b", "b1")]
    pods = [
        redis_pod("m0", "c", 0, "master", node="a1"),
        redis_pod("r0", "c", 0, "replica", node="b1"),
        redis_pod("m1", "c", 1, None),
        redis_pod("r1", "c", 1, None),
        other_pod("o", "a2", "100m", "4Gi"),
    ]
    snap = snapshot(nodes, pods)
    policy = Policy()
    plan = solve(snap, policy, options=SolveOptions(time_limit=10))
    terms = evaluate_objective(snap, policy, plan)
    assert terms["memberSpread"] > 0
    assert terms["total"] == brute_force_optimum(snap, policy)


def test_member_spread_counts_every_role() -> None:
    """A zone's loss takes members of either role: the checker counts both."""
    snap = rolled(left=-1)
    terms = evaluate_objective(snap, Policy(), greedy_plan(snap, Policy()))
    assert terms["memberSpread"] == 10 * 4  # two masters and two replicas in every zone


def crowded() -> Snapshot:
    """Redis cluster ``c1`` runs a master in zone c and a member in zone b; its shard 0's
    replica is pending. Zone a holds none of c1's members, but its one node has room for one
    2Gi pod only, and cluster ``c2``'s pending pod accepts zone a alone (a node selector)."""
    nodes = [
        node("a1", "a", "a1", memory="3Gi"),
        node("b1", "b", "b1", memory="16Gi"),
        node("c1", "c", "c1", memory="16Gi"),
    ]
    pods = [
        redis_pod("c1-m0", "c1", 0, "master", node="c1", memory="2Gi"),
        redis_pod("c1-r0", "c1", 0, "replica", memory="2Gi"),
        redis_pod("c1-m1", "c1", 1, "master", node="b1", memory="2Gi"),
        redis_pod(
            "c2-m0",
            "c2",
            0,
            "master",
            memory="2Gi",
            nodeSelector={"topology.kubernetes.io/zone": "a"},
        ),
    ]
    return snapshot(nodes, pods)


def test_greedy_weighs_its_roomiest_pass_where_the_spread_leaves_a_pod_out() -> None:
    """Sent by memberSpread to zone a (none of its cluster there), c1's replica takes the only
    room c2's pod accepts; the roomiest pass sends it to zone b and places both. Greedy's plan
    (the binder's greedy solver, the fallback and repair of the levels) keeps the pass that
    places more, and judged by the checker it leaves nothing out and breaks no hard rule."""
    snap, policy = crowded(), Policy()
    spread = greedy_placement(snap, policy)
    assert spread.node.get("default/c1-r0") == "a1"
    assert "default/c2-m0" not in spread.node
    roomiest = greedy_placement(snap, policy, roomiest=True)
    assert roomiest.node == {"default/c1-r0": "b1", "default/c2-m0": "a1"}
    plan = greedy_plan(snap, policy)
    assert not plan.unplaced
    assert not [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    assert final_placement(snap, plan)["default/c1-r0"][0] == "b1"
