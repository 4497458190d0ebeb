"""Greedy's own majority keeping (solver/greedy.py ``_keep_majorities``): it counts the masters
once and keeps the count as shards drop; here it is held against the plain way, counting every
master again after each drop, on random clusters."""

import random
from collections import Counter, defaultdict
from typing import Any

import pytest

from models.cluster import Role
from models.policy import Policy
from models.snapshot import Snapshot
from solver.greedy import _keep_majorities, greedy_placement
from solver.placement import Placement
from tests.kube_dicts import node, redis_pod, snapshot


def _recounting(snap: Snapshot, policy: Policy, placement: Placement, placed: set[str]) -> None:
    """The plain way: every master counted again after each drop."""
    level = policy.rules.survive
    while True:
        masters: dict[str, list[tuple[str | None, str, bool]]] = defaultdict(list)
        for key, members in snap.shards.items():
            for m in members:
                name = placement.node.get(m.key) or m.pod.node_name
                role = placement.role.get(m.key) if m.pod.pending else m.role
                found = snap.node_by_name.get(name or "")
                if role is Role.MASTER and found is not None:
                    masters[m.cluster].append(
                        (found.domain(level), key, m.pod.pending and key in placed)
                    )
        worst = None
        for cluster, entries in masters.items():
            per = Counter(d for d, _, _ in entries)
            domain, most = max(per.items(), key=lambda kv: (kv[1], str(kv[0])))
            if 2 * most > len(entries) - 1 and any(d == domain and n for d, _, n in entries):
                worst = (cluster, domain)
                break
        if worst is None:
            return
        victim = max(k for d, k, n in masters[worst[0]] if d == worst[1] and n)
        placed.discard(victim)
        for m in snap.shards[victim]:
            if m.pod.pending:
                placement.node.pop(m.key, None)
                placement.role.pop(m.key, None)
                placement.unplaced[m.key] = "dropped"


def _cluster(rng: random.Random) -> list[dict[str, Any]]:
    zones = "abc"[: rng.randint(2, 3)]
    nodes = [
        node(f"{z}{i}", z, f"{z}-r{rng.randrange(3)}", memory="16Gi")
        for z in zones
        for i in range(rng.randint(2, 6))
    ]
    names = [n["metadata"]["name"] for n in nodes]
    pods: list[dict[str, Any]] = []
    for c in range(rng.randint(1, 3)):
        for s in range(rng.randint(2, 7)):
            running = rng.random() < 0.4
            for r in range(rng.randint(1, 3)):
                role = "master" if r == 0 else "replica"
                where = rng.choice(names) if running else None
                pods.append(redis_pod(f"c{c}-{s}-{r}", f"c{c}", s, role, node=where))
    return nodes + pods


@pytest.mark.parametrize("level", ["zone", "rack", "host"])
@pytest.mark.parametrize("seed", range(25))
def test_the_kept_count_drops_what_recounting_drops(level: str, seed: int) -> None:
    objects = _cluster(random.Random(seed))
    nodes = sum(o["kind"] == "Node" for o in objects)
    snap = snapshot(objects[:nodes], objects[nodes:])
    placement = greedy_placement(snap, Policy())  # placed without the rule: it may break it
    placed = {m.shard_key for m in snap.pending if m.key in placement.node}
    policy = Policy.model_validate({"rules": {"survive": level}})
    kept = Placement(dict(placement.node), dict(placement.role), dict(placement.unplaced))
    recounted = Placement(dict(placement.node), dict(placement.role), dict(placement.unplaced))
    _keep_majorities(snap, policy, kept, set(placed))
    _recounting(snap, policy, recounted, set(placed))
    assert kept.node == recounted.node
    assert kept.role == recounted.role
    assert set(kept.unplaced) == set(recounted.unplaced)


def test_the_random_clusters_do_break_the_rule() -> None:
    """So that the comparison above compares drops, not two empty loops."""
    dropping = 0
    for seed in range(25):
        objects = _cluster(random.Random(seed))
        nodes = sum(o["kind"] == "Node" for o in objects)
        snap = snapshot(objects[:nodes], objects[nodes:])
        placement = greedy_placement(snap, Policy())
        placed = {m.shard_key for m in snap.pending if m.key in placement.node}
        before = len(placement.node)
        _recounting(snap, Policy.model_validate({"rules": {"survive": "zone"}}), placement, placed)
        dropping += len(placement.node) < before
    assert dropping >= 5
