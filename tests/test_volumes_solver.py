"""Volume topology is part of ``fits`` in every encoding and in the checker.

Each encoding (greedy, the levels, the node-class model) is run on its own on small clusters
with local PVs, bound claims and zonal classes; its placement is judged here by hand (which
node holds which PV) and by the independent checker.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import check_plan
from solver.classes.model import ClassOptions, solve_classes
from solver.classes.problem import build_problem
from solver.greedy import greedy_placement
from solver.levels.topdown import LevelsOptions, place_by_levels
from solver.placement import Placement, to_plan
from solver.solve import SolveOptions, solve
from tests.bruteforce import plan_for
from tests.kube_dicts import node, redis_pod, snapshot
from tests.volume_dicts import claim, local_pv, mounts, storage_class

ZONES = ("a", "b", "c")


def _greedy(snap: Snapshot, policy: Policy) -> Placement:
    return greedy_placement(snap, policy)


def _levels(snap: Snapshot, policy: Policy) -> Placement:
    result = place_by_levels(snap, policy, None, LevelsOptions(time.monotonic() + 10, 1, 0))
    return result.placement


def _classes(snap: Snapshot, policy: Policy) -> Placement:
    problem = build_problem(snap, policy, "place")
    return solve_classes(problem, ClassOptions(time_limit=10, workers=1, seed=0), None).placement


ENCODINGS: dict[str, Callable[[Snapshot, Policy], Placement]] = {
    "greedy": _greedy,
    "levels": _levels,
    "classes": _classes,
}


def _cluster(
    nodes: int, pv_nodes: Sequence[int], shards: int, size: int = 2, extra: Sequence[Any] = ()
) -> Snapshot:
    """``nodes`` nodes over three zones, one free local PV on each of ``pv_nodes``, and
    ``shards`` StatefulSet-like shards whose pods each claim ``data-<pod>`` on local-nvme."""
    objects: list[Any] = [node(f"n{i}", ZONES[i % 3], f"r{i}", memory="8Gi") for i in range(nodes)]
    objects.append(storage_class("local-nvme"))
    objects += [local_pv(f"pv-n{i}", node=f"n{i}") for i in pv_nodes]
    for s in range(shards):
        for r in range(size):
            name = f"redis-{s}-{r}"
            objects.append(claim(f"data-{name}"))
            objects.append(redis_pod(name, "redis", s, None, **mounts(f"data-{name}")))
    objects += extra
    return snapshot(
        [o for o in objects if o["kind"] == "Node"], [o for o in objects if o["kind"] != "Node"]
    )


def _pv_holders(snap: Snapshot) -> set[str]:
    return {v.terms[0].match_expressions[0].values[0] for v in snap.free_volumes}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_pod_lands_on_its_own_free_local_pv(encoding: str) -> None:
    snap = _cluster(9, [0, 1, 2, 3, 4, 5], shards=3)
    placement = ENCODINGS[encoding](snap, Policy())
    nodes = [placement.node.get(m.key) for m in snap.members]
    assert None not in nodes, placement.unplaced
    assert set(nodes) <= _pv_holders(snap)
    assert len(set(nodes)) == len(nodes)  # one PV each: six pods on the six PV nodes
    plan = to_plan(snap, placement, "place", "FEASIBLE")
    assert [v for v in check_plan(snap, Policy(), plan) if v.severity == "hard"] == []


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_two_pods_never_count_on_one_free_pv(encoding: str) -> None:
    # Two one-member shards, one PV in the whole cluster, masters allowed to share a node: only
    # the PV count keeps the second pod off n0.
    snap = _cluster(3, [0], shards=2, size=1)
    policy = Policy.model_validate({"rules": {"maxMastersPerNode": 5}})
    placement = ENCODINGS[encoding](snap, policy)
    placed = [m.key for m in snap.members if m.key in placement.node]
    assert len(placed) == 1
    assert placement.node[placed[0]] == "n0"


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_bound_claim_takes_its_pod_to_the_pvs_zone(encoding: str) -> None:
    zonal = local_pv("disk-1", zone="c", storage_class="zonal", claim="default/data-redis-0-0")
    snap = _cluster(
        6,
        [],
        shards=0,
        extra=[
            storage_class("zonal", provisioner="pd.csi.storage.gke.io"),
            zonal,
            claim("data-redis-0-0", storage_class="zonal", volume="disk-1"),
            redis_pod("redis-0-0", "redis", 0, None, **mounts("data-redis-0-0")),
            redis_pod("redis-0-1", "redis", 0, None),
        ],
    )
    placement = ENCODINGS[encoding](snap, Policy())
    node_of = snap.node_by_name
    assert node_of[placement.node["default/redis-0-0"]].zone == "c"
    assert "default/redis-0-1" in placement.node


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_provisioned_class_keeps_pods_in_its_allowed_zones(encoding: str) -> None:
    extra: list[Any] = [storage_class("zonal", provisioner="ebs.csi.aws.com", zones=("a", "b"))]
    for r in range(2):
        extra.append(claim(f"d-{r}", storage_class="zonal"))
        extra.append(redis_pod(f"redis-0-{r}", "redis", 0, None, **mounts(f"d-{r}")))
    snap = _cluster(6, [], shards=0, extra=extra)
    placement = ENCODINGS[encoding](snap, Policy())
    zones = {snap.node_by_name[placement.node[m.key]].zone for m in snap.members}
    assert zones == {"a", "b"}


def test_an_immediate_unbound_claim_holds_its_pod_and_says_why() -> None:
    extra = [
        storage_class("fast", provisioner="ebs.csi.aws.com", mode="Immediate"),
        claim("d-0", storage_class="fast"),
        redis_pod("redis-0-0", "redis", 0, None, **mounts("d-0")),
    ]
    snap = _cluster(3, [], shards=0, extra=extra)
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=5))
    (unplaced,) = plan.unplaced
    assert unplaced.pod == "default/redis-0-0"
    assert "default/d-0" in unplaced.reason
    assert "Immediate" in unplaced.reason


def test_explain_names_the_claim_without_a_pv() -> None:
    snap = _cluster(3, [], shards=1, size=1)  # a local claim, no PV anywhere
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=5))
    (unplaced,) = plan.unplaced
    assert "default/data-redis-0-0" in unplaced.reason
    assert "local-nvme" in unplaced.reason


def test_the_full_solve_places_four_shards_on_the_nine_pv_nodes_of_twelve() -> None:
    snap = _cluster(12, [0, 1, 2, 3, 4, 5, 6, 7, 8], shards=4)
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=10))
    assert plan.unplaced == []
    nodes = [a.node for a in plan.assignments]
    assert set(nodes) <= _pv_holders(snap)
    assert len(set(nodes)) == 8
    for s in range(4):
        shard = [snap.node_by_name[a.node or ""] for a in plan.assignments if a.shard == str(s)]
        assert len({n.zone for n in shard}) == 2
    assert [v for v in plan.violations if v.severity == "hard"] == []


def test_the_checker_flags_a_pv_affinity_it_breaks() -> None:
    snap = _cluster(3, [0], shards=1, size=1)
    plan = plan_for(snap, {"redis-0-0": "n1"})
    fits = [v for v in check_plan(snap, Policy(), plan) if v.rule == "fits"]
    assert any("default/data-redis-0-0" in v.message for v in fits)
    assert {tuple(v.nodes) for v in fits} == {("n1",)}
    good = plan_for(snap, {"redis-0-0": "n0"}, roles={"redis-0-0": "master"})
    # a one-member shard is lost with its host whatever the PVs: only that soft finding
    assert {(v.rule, v.severity) for v in check_plan(snap, Policy(), good)} == {("survive", "soft")}


def test_the_checker_flags_two_claims_on_one_pv() -> None:
    snap = _cluster(3, [0], shards=2, size=1)
    policy = Policy.model_validate({"rules": {"maxMastersPerNode": 5}})
    plan = plan_for(snap, {"redis-0-0": "n0", "redis-1-0": "n0"})
    (violation,) = [v for v in check_plan(snap, policy, plan) if v.rule == "fits"]
    assert violation.nodes == ["n0"]
    assert sorted(violation.pods) == ["default/redis-0-0", "default/redis-1-0"]


def test_the_checker_matches_claims_to_pvs_exactly() -> None:
    # n0 holds a 100Gi and a 10Gi PV: a 50Gi claim and a 5Gi claim both fit there, two 50Gi
    # claims do not (the count per class would say two).
    extra: list[Any] = [
        local_pv("big", node="n0", capacity="100Gi"),
        local_pv("small", node="n0", capacity="10Gi"),
        claim("d-0", request="50Gi"),
        claim("d-1", request="50Gi"),
        claim("d-2", request="5Gi"),
        redis_pod("redis-0-0", "redis", 0, None, **mounts("d-0")),
        redis_pod("redis-1-0", "redis", 1, None, **mounts("d-1")),
        redis_pod("redis-2-0", "redis", 2, None, **mounts("d-2")),
    ]
    snap = _cluster(3, [], shards=0, extra=extra)
    policy = Policy.model_validate({"rules": {"maxMastersPerNode": 5}})
    fine = plan_for(snap, {"redis-0-0": "n0", "redis-2-0": "n0", "redis-1-0": None})
    assert [v for v in check_plan(snap, policy, fine) if v.rule == "fits"] == []
    clash = plan_for(snap, {"redis-0-0": "n0", "redis-1-0": "n0", "redis-2-0": None})
    assert [v.nodes for v in check_plan(snap, policy, clash) if v.rule == "fits"] == [["n0"]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_no_encoding_ever_breaks_a_volume_rule_the_checker_knows(encoding: str, seed: int) -> None:
    """Random clusters: PVs on a random subset of nodes (some nodes two), some claims bound; the
    checker finds no ``fits`` violation in any encoding's placement, and what is placed sits on
    a node holding its PV."""
    import random

    rng = random.Random(seed)
    count = rng.randint(4, 9)
    extra: list[Any] = []
    holders = rng.sample(range(count), rng.randint(1, count))
    for i in holders:
        for k in range(rng.choice((1, 1, 2))):
            extra.append(local_pv(f"pv-n{i}-{k}", node=f"n{i}"))
    bound_to = rng.choice(holders)
    extra.append(local_pv("pv-bound", node=f"n{bound_to}", claim="default/data-redis-0-0"))
    extra.append(claim("data-redis-0-0", volume="pv-bound"))
    for s in range(rng.randint(1, 4)):
        for r in range(2):
            name = f"redis-{s}-{r}"
            if name != "redis-0-0":
                extra.append(claim(f"data-{name}"))
            extra.append(redis_pod(name, "redis", s, None, **mounts(f"data-{name}")))
    snap = _cluster(count, [], shards=0, extra=extra)
    policy = Policy.model_validate({"rules": {"maxMastersPerNode": 2}})
    placement = ENCODINGS[encoding](snap, policy)
    plan = to_plan(snap, placement, "place", "FEASIBLE")
    assert [v.message for v in check_plan(snap, policy, plan) if v.rule == "fits"] == []
    if "default/redis-0-0" in placement.node:
        assert placement.node["default/redis-0-0"] == f"n{bound_to}"


def test_explain_names_the_claim_when_too_few_nodes_hold_pvs_for_a_shard() -> None:
    snap = _cluster(6, [0, 1], shards=1, size=3)  # three members, two PV nodes
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=5))
    assert len(plan.unplaced) == 3
    for unplaced in plan.unplaced:
        assert "2 hosts accept" in unplaced.reason
        assert "4 claim default/data-redis-0-0" in unplaced.reason
