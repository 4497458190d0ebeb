"""Masters spread at every level: a rack or zone failure takes no more masters than it must.

Every figure here is the independent checker's (``solver.check``) on the finished plan, on
uneven racks and zones; the tiny cases are compared with the exhaustive search.
"""

from collections import Counter
from typing import Any

import pytest

from models.cluster import Role
from models.kube_objects import build_snapshot, flatten
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver.check import check_plan, evaluate_objective, final_placement, worst_domain_loss
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve
from tests.bruteforce import brute_force_optimum
from tests.kube_dicts import node, redis_pod, snapshot

OPTS = SolveOptions(time_limit=10)


def masters_per(snap: Snapshot, plan: Plan, level: str) -> Counter[tuple[str, str | None]]:
    """(Redis cluster, zone or zone/rack) -> its masters there, in the plan's final placement."""
    nodes = snap.node_by_name
    out: Counter[tuple[str, str | None]] = Counter()
    for key, (name, role) in final_placement(snap, plan).items():
        if role is not Role.MASTER or name not in nodes:
            continue
        n = nodes[name]
        member = next(m for m in snap.members if m.key == key)
        out[(member.cluster, n.zone if level == "zone" else f"{n.zone}/{n.rack}")] += 1
    return out


def racks_of(snap: Snapshot) -> set[str]:
    return {f"{n.zone}/{n.rack}" for n in snap.nodes}


def test_tiny_uneven_racks_match_the_brute_force_optimum() -> None:
    """Racks a1 and b1 have the large nodes, which memory balance alone would give the masters:
    a rack failure would then take two. A few percent of memory weigh less than a master lost
    with a rack, so the optimum puts every master in a rack of its own."""
    nodes = [
        node("n1", "a", "a1", memory="64Gi"),
        node("n2", "a", "a1", memory="64Gi"),
        node("n3", "a", "a2", memory="16Gi"),
        node("n4", "b", "b1", memory="64Gi"),
        node("n5", "b", "b1", memory="64Gi"),
        node("n6", "b", "b2", memory="16Gi"),
    ]
    pods = [redis_pod(f"c-{s}-m", "c", s, "master", memory="1Gi") for s in range(3)]
    pods += [redis_pod(f"c-{s}-r", "c", s, "replica", memory="1Gi") for s in range(3)]
    snap = snapshot(nodes, pods)
    policy = Policy()
    best = brute_force_optimum(snap, policy)
    plan = solve(snap, policy, options=OPTS)
    assert best is not None
    assert not plan.unplaced
    assert evaluate_objective(snap, policy, plan)["total"] == best
    assert max(masters_per(snap, plan, "rack").values()) == 1
    assert max(masters_per(snap, plan, "zone").values()) == 2


def test_tiny_uneven_zones_match_the_brute_force_optimum() -> None:
    """Zone a has three racks, zone b one: the masters take a rack each, two of them in zone a
    (the zone loss is 2 of 3 whatever the placement, 3 shards in 2 zones)."""
    nodes = [
        node("n1", "a", "a1"),
        node("n2", "a", "a2"),
        node("n3", "a", "a3"),
        node("n4", "b", "b1", memory="64Gi"),
        node("n5", "b", "b1", memory="64Gi"),
    ]
    pods = [redis_pod(f"c-{s}", "c", s, "master") for s in range(3)]
    snap = snapshot(nodes, pods)
    policy = Policy()
    best = brute_force_optimum(snap, policy)
    plan = solve(snap, policy, options=OPTS)
    assert best is not None
    assert evaluate_objective(snap, policy, plan)["total"] == best
    per_rack = masters_per(snap, plan, "rack")
    assert max(per_rack.values()) == 1
    assert max(masters_per(snap, plan, "zone").values()) == 2
    loss = {d.level: d for d in worst_domain_loss(snap, policy, plan)}
    assert loss["rack"].master_loss_ratio == pytest.approx(1 / 3)


def generated(nodes: int, shards: int, **shape: Any) -> Snapshot:
    policy = Policy()
    return build_snapshot(flatten([generate_cluster(nodes, shards, seed=3, **shape)]), policy)


UNEVEN = [
    pytest.param({"racks_per_zone": 6, "rack_sizes": (8, 30)}, id="uneven-racks"),
    pytest.param(
        {"racks_per_zone": 5, "rack_sizes": (5, 40), "zone_shares": (0.5, 0.3, 0.2)},
        id="uneven-racks-and-zones",
    ),
]


@pytest.mark.parametrize("shape", UNEVEN)
def test_plans_spread_masters_evenly_over_uneven_racks(shape: dict[str, Any]) -> None:
    """300 nodes whose racks are filled in name order (where the cheapest nodes cluster): every
    rack holds at most ceil(masters / racks), and zones stay as even as before."""
    snap = generated(300, 90, **shape)
    policy = Policy()
    plan = solve(snap, policy, options=OPTS)
    assert not plan.unplaced
    assert not [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    masters = sum(masters_per(snap, plan, "zone").values())
    assert masters == 90
    assert max(masters_per(snap, plan, "rack").values()) == -(-masters // len(racks_of(snap)))
    assert max(masters_per(snap, plan, "zone").values()) == 30
    # The plan's own report says the same.
    loss = {d.level: d for d in plan.worst_domain_loss}
    assert loss["rack"].master_loss_ratio == pytest.approx(
        max(masters_per(snap, plan, "rack").values()) / masters
    )


@pytest.mark.parametrize("shape", UNEVEN)
def test_greedy_spreads_masters_over_zones_and_racks(shape: dict[str, Any]) -> None:
    """Greedy puts each master in the zone, then the rack, with the fewest of its cluster's."""
    snap = generated(300, 90, **shape)
    plan = greedy_plan(snap, Policy())
    assert not plan.unplaced
    even = -(-90 // len(racks_of(snap)))
    assert max(masters_per(snap, plan, "rack").values()) <= even
    assert max(masters_per(snap, plan, "zone").values()) == 30


def test_each_redis_cluster_spreads_on_its_own() -> None:
    """Three Redis clusters: each one's masters are spread over the racks, not only their sum."""
    snap = generated(300, 90, racks_per_zone=6, rack_sizes=(8, 30), clusters=3)
    plan = solve(snap, Policy(), options=OPTS)
    assert not plan.unplaced
    per_rack = masters_per(snap, plan, "rack")
    racks = len(racks_of(snap))
    for cluster in {c for c, _ in per_rack}:
        assert max(n for (c, _), n in per_rack.items() if c == cluster) == -(-30 // racks)
