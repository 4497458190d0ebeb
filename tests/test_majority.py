"""A place-mode plan never leaves a Redis cluster further short of a master majority than its
running pods leave it (rules.survive). Shortfalls are the independent checker's count
(solver.check.majority_shortfall); the placements are written by hand."""

import random
from typing import Any

from models.cluster import Role
from models.policy import Policy
from solver.check import keep_plan, majority_shortfall
from solver.majority import keep_majorities
from solver.placement import Placement, to_plan
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot

ZONE = Policy.model_validate({"rules": {"survive": "zone"}})


def _broken() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Masters of c: 3 in zone a, 1 in b, 1 in c. Losing a leaves 2 of 5: 1 short of 3."""
    nodes = [node(f"{z}{i}", z, f"{z}-r", memory="16Gi") for z in "abcd" for i in range(4)]
    pods = [
        redis_pod(f"c-{s}-0", "c", s, "master", node=where)
        for s, where in enumerate(["a0", "a1", "a2", "b0", "c0"])
    ]
    pods += [redis_pod(f"c-{s}-0", "c", s, "master") for s in range(5, 9)]
    return nodes, pods


def _placed(snap: Any, where: dict[str, str]) -> Placement:
    placement = Placement()
    for key, name in where.items():
        placement.node[key] = name
        placement.role[key] = Role.MASTER
    return placement


def test_masters_added_to_the_broken_zone_alone_are_left_out_until_no_worse() -> None:
    """Three new masters in zone a, one in d: a's loss would leave 3 of 9 (2 short). Dropping
    two of a's new masters leaves 3 of 7: 1 short, as before; the one in d stays."""
    snap = snapshot(*_broken(), policy=ZONE)
    assert majority_shortfall(snap, keep_plan(snap), "zone") == {"default/c": 1}
    placement = _placed(
        snap,
        {
            "default/c-5-0": "a3",
            "default/c-6-0": "a1",
            "default/c-7-0": "a2",
            "default/c-8-0": "d0",
        },
    )
    worse = to_plan(
        snap, Placement(dict(placement.node), dict(placement.role)), "place", "FEASIBLE"
    )
    assert majority_shortfall(snap, worse, "zone") == {"default/c": 2}

    dropped = keep_majorities(snap, ZONE, placement)

    assert dropped == {"default/c/5", "default/c/6"}
    assert set(placement.node) == {"default/c-7-0", "default/c-8-0"}
    assert "default/c-5-0" in placement.unplaced
    plan = to_plan(snap, placement, "place", "FEASIBLE")
    assert majority_shortfall(snap, plan, "zone") == {"default/c": 1}


def test_masters_that_shorten_the_break_or_keep_it_stay() -> None:
    """New masters outside zone a only: a's loss leaves 2 + 4 of 9, a majority; nothing goes.
    And without survive nothing is judged at all."""
    snap = snapshot(*_broken(), policy=ZONE)
    where = {f"default/c-{s}-0": f"{z}1" for s, z in zip(range(5, 9), "bcdd", strict=True)}
    placement = _placed(snap, where)
    assert keep_majorities(snap, ZONE, placement) == set()
    assert placement.node == where
    assert majority_shortfall(snap, to_plan(snap, placement, "place", "FEASIBLE"), "zone") == {
        "default/c": 0
    }
    piled = _placed(snap, {f"default/c-{s}-0": f"a{s - 5}" for s in range(5, 9)})
    assert keep_majorities(snap, Policy(), piled) == set()
    assert len(piled.node) == 4


def _hetero(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """40 nodes over 4 zones of unequal size, three pools, a quarter tainted; 8 Redis clusters
    partly running, the first one master short of a majority against zone a's loss; 30 pending
    shards of 3 (90 pods) more than fit, half held by node affinity to two pools or two zones."""
    rng = random.Random(seed)
    zones = "abcd"
    pools = {"small": "16Gi", "medium": "32Gi", "large": "64Gi"}
    nodes, by_zone = [], {z: [] for z in zones}  # type: ignore[var-annotated]
    for i in range(40):
        zone = zones[i % 4] if i < 8 else rng.choices(zones, weights=(4, 3, 2, 1))[0]
        pool = rng.choice(list(pools))
        taints = ["dedicated=batch:NoSchedule"] if rng.random() < 0.25 else []
        nodes.append(
            node(f"n{i}", zone, f"{zone}-r{i % 3}", "16", pools[pool], taints=taints,
                 labels={"pool": pool})
        )  # fmt: skip
        by_zone[zone].append(f"n{i}")
    pods: list[dict[str, Any]] = []
    shard = 0
    for c in range(8):
        for k in range(5 if c == 0 else 3):
            zone = ("a" if k < 3 else "bc"[k - 3]) if c == 0 else zones[k % 4]
            home = rng.choice(by_zone[zone])
            others = rng.sample([n for z in zones if z != zone for n in by_zone[z]], 2)
            for r, where in enumerate([home, *others]):
                role = "master" if r == 0 else "replica"
                pods.append(redis_pod(f"rc{c}-{shard}-{r}", f"rc{c}", shard, role, node=where,
                                      cpu="2", memory="16Gi"))  # fmt: skip
            shard += 1
    for s in range(30):
        extra: dict[str, Any] = {}
        if s % 4 in (1, 3):
            key, values = (
                ("pool", ["small", "medium"])
                if s % 4 == 1
                else ("topology.kubernetes.io/zone", ["a", rng.choice("bcd")])
            )
            term = {"key": key, "operator": "In", "values": values}
            extra["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [term]}]
                    }
                }
            }
        if s % 3 == 0:
            extra["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        for r in range(3):
            role = "master" if r == 0 else "replica"
            pods.append(redis_pod(f"rc{s % 8}-{shard}-{r}", f"rc{s % 8}", shard, role,
                                  cpu="2", memory="16Gi", **extra))  # fmt: skip
        shard += 1
    return nodes, pods


def test_a_heterogeneous_cluster_that_breaks_survive_already_is_never_made_worse() -> None:
    """The shape of a cluster where plans once left the broken Redis cluster 2 and 4 short:
    four zones, taints, node affinity, eight Redis clusters, more pending pods than fit."""
    for seed in (1, 2, 3):
        snap = snapshot(*_hetero(seed), policy=ZONE)
        before = majority_shortfall(snap, keep_plan(snap), "zone")
        assert before["default/rc0"] == 1
        plan = solve(snap, ZONE, options=SolveOptions(time_limit=5, workers=1))
        assert len(plan.unplaced) < len(snap.pending)  # it places something
        after = majority_shortfall(snap, plan, "zone")
        assert all(short <= before.get(k, 0) for k, short in after.items()), (seed, after)
