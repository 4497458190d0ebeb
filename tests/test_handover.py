"""solver.handover: who takes a master's role before its pod stops, and when a pod must wait.

The choice is compared with an independent count of what each zone's loss takes (written here,
sharing nothing with solver.survival), over every candidate of small random placements."""

import itertools
import random
from collections import Counter, defaultdict
from typing import Any

import pytest

from models.cluster import Role
from models.policy import Policy
from models.snapshot import Snapshot
from solver.handover import MemberHealth, choose_successor, judge_disruption, plan_maintenance
from tests.kube_dicts import node, redis_pod, snapshot

ZONES = ("a", "b", "c")


def _nodes(per_zone: int = 3) -> list[dict[str, Any]]:
    return [node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}") for z in ZONES for i in range(per_zone)]


def _healthy(snap: Snapshot, **overrides: MemberHealth) -> dict[str, MemberHealth]:
    health = {m.key: MemberHealth(ready=True, in_sync=True) for m in snap.members}
    health.update({f"default/{k}": v for k, v in overrides.items()})
    return health


def five_shards() -> Snapshot:
    """Masters: zone a holds s0 and s1, zone b s2 and s3, zone c s4 (2/2/1: any zone's loss
    leaves 3 of 5). s0's replicas are in b and c."""
    layout = {
        "s0": [("a0", "master"), ("b0", "replica"), ("c0", "replica")],
        "s1": [("a1", "master"), ("b1", "replica")],
        "s2": [("b0", "master"), ("c1", "replica")],
        "s3": [("b1", "master"), ("c2", "replica")],
        "s4": [("c0", "master"), ("a2", "replica")],
    }
    pods = [
        redis_pod(f"{shard}-{i}", "cache", shard, role, node=where)
        for shard, members in layout.items()
        for i, (where, role) in enumerate(members)
    ]
    nodes = [
        node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}", pods=4) for z in ZONES for i in range(3)
    ]
    return snapshot(nodes, pods, Policy())


def test_the_master_hands_over_to_the_replica_that_keeps_the_majority() -> None:
    snap = five_shards()
    verdict = judge_disruption(snap, Policy(), "default/s0-0", _healthy(snap))
    assert verdict.kind == "handover"
    assert verdict.successor is not None
    # s0-1 (zone b) would give zone b 3 of 5 masters; s0-2 (zone c) leaves 2/2/1... minus a's
    assert verdict.successor.pod == "default/s0-2"
    assert "zone" not in verdict.successor.broken


def test_a_replica_goes_when_its_master_serves() -> None:
    snap = five_shards()
    verdict = judge_disruption(snap, Policy(), "default/s0-1", _healthy(snap))
    assert verdict.kind == "allow"


def test_a_pod_waits_while_another_member_of_its_shard_is_not_ready() -> None:
    snap = five_shards()
    health = _healthy(snap, **{"s1-0": MemberHealth(ready=False, in_sync=False)})
    verdict = judge_disruption(snap, Policy(), "default/s1-1", health)
    assert verdict.kind == "wait"
    assert "default/s1-0 is not Ready" in verdict.reason


def test_a_pod_waits_while_another_member_is_not_in_sync() -> None:
    snap = five_shards()
    health = _healthy(snap, **{"s1-1": MemberHealth(ready=True, in_sync=False)})
    verdict = judge_disruption(snap, Policy(), "default/s1-0", health)
    assert verdict.kind == "wait"
    assert "not in sync" in verdict.reason


def test_no_successor_in_sync_means_wait_not_a_stop() -> None:
    snap = five_shards()
    health = _healthy(
        snap,
        **{
            "s0-1": MemberHealth(ready=True, in_sync=False),
            "s0-2": MemberHealth(ready=True, in_sync=False),
        },
    )
    verdict = judge_disruption(snap, Policy(), "default/s0-0", health)
    assert verdict.kind == "wait"


def test_unmanaged_pods_and_shards_of_one_go() -> None:
    nodes = _nodes()
    pods = [redis_pod("solo-0", "solo", "0", "master", node="a0")]
    snap = snapshot(nodes, pods)
    assert judge_disruption(snap, Policy(), "default/other", {}).kind == "allow"
    assert judge_disruption(snap, Policy(), "default/solo-0", _healthy(snap)).kind == "allow"


def test_a_successor_that_stays_beats_one_that_goes_soon() -> None:
    snap = five_shards()
    # zone c is cordoned too: its replica of s0 will stop soon, so zone b's takes over even
    # though zone b then holds three masters (nothing better stays)
    verdict = judge_disruption(
        snap, Policy(), "default/s0-0", _healthy(snap), going={"default/s0-2", "default/s4-0"}
    )
    assert verdict.kind == "handover"
    assert verdict.successor is not None and verdict.successor.pod == "default/s0-1"


def test_maintenance_of_a_zone_hands_each_master_over_off_the_zone() -> None:
    snap = five_shards()
    plan = plan_maintenance(snap, Policy(), ["a0", "a1", "a2"], _healthy(snap))
    assert plan.safe, plan.summary()
    moved = {h.pod: h.successor.pod for h in plan.handovers if h.successor}
    assert set(moved) == {"default/s0-0", "default/s1-0"}
    assert moved["default/s1-0"] == "default/s1-1"
    assert all(not succ.startswith("default/s4") for succ in moved.values())
    assert plan.replicas == ["default/s4-1"]


def test_maintenance_refuses_what_takes_a_whole_shard() -> None:
    snap = five_shards()
    plan = plan_maintenance(snap, Policy(), ["a1", "b1"], _healthy(snap))
    assert not plan.safe
    assert any("default/cache/s1 has every member" in line for line in plan.lost)


def test_maintenance_names_a_lost_majority() -> None:
    snap = five_shards()
    health = _healthy(
        snap,
        **{
            "s2-1": MemberHealth(ready=True, in_sync=False),
            "s3-1": MemberHealth(ready=True, in_sync=False),
        },
    )
    # zone b's masters s2 and s3 have their only replicas out of sync: waits, not a loss
    plan = plan_maintenance(snap, Policy(), ["b0", "b1", "b2"], health)
    assert not plan.safe
    assert {w.pod for w in plan.waits} == {"default/s2-0", "default/s3-0"}


# -- the choice against an independent count --------------------------------------------------


def _zone_losses(snap: Snapshot, masters: set[str], gone: set[str], level: str = "zone") -> int:
    """Domains whose loss takes a shard or the master majority, counted from scratch."""
    zone_of = {
        n.name: {"zone": n.zone, "rack": n.labels.get("rack"), "host": n.name}[level]
        for n in snap.nodes
    }
    alive = [m for m in snap.members if m.key not in gone]
    total_masters = sum(1 for m in alive if m.key in masters)
    bad = 0
    for zone in {zone_of[m.pod.node_name or ""] for m in alive}:
        left = [m for m in alive if zone_of[m.pod.node_name or ""] != zone]
        shards_left = {m.shard_key for m in left}
        if shards_left != {m.shard_key for m in alive}:
            bad += 1
            continue
        if 2 * sum(1 for m in left if m.key in masters) <= total_masters:
            bad += 1
    return bad


def _random_placement(seed: int) -> Snapshot:
    rng = random.Random(seed)
    nodes = [
        node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}", pods=8) for z in ZONES for i in range(3)
    ]
    names = [n["metadata"]["name"] for n in nodes]
    pods = []
    for s in range(rng.randint(3, 6)):
        hosts = rng.sample(names, 3)
        for i, host in enumerate(hosts):
            pods.append(
                redis_pod(f"s{s}-{i}", "c", f"s{s}", "master" if i == 0 else "replica", node=host)
            )
    return snapshot(nodes, pods, Policy())


@pytest.mark.parametrize("seed", range(25))
def test_the_successor_is_never_worse_than_another_candidate(seed: int) -> None:
    snap = _random_placement(seed)
    masters = {m.key for m in snap.members if m.role == Role.MASTER}
    health = _healthy(snap)
    for master in sorted(masters):
        member = next(m for m in snap.members if m.key == master)
        chosen = choose_successor(snap, Policy(), member, (), health)
        assert chosen is not None
        scores = {}
        for candidate in snap.shards[member.shard_key]:
            if candidate.key == master:
                continue
            after = (masters - {master}) | {candidate.key}
            per_level = [_zone_losses(snap, after, {master}, lv) for lv in ("zone", "rack", "host")]
            scores[candidate.key] = (sum(1 for n in per_level if n), sum(per_level))
        assert scores[chosen.pod] == min(scores.values()), (master, scores, chosen.pod)
        # and the checker's verdict agrees with the count: zone survives iff no zone loss
        zone = next(v for v in chosen.verdicts if v.level == "zone")
        after = (masters - {master}) | {chosen.pod}
        assert zone.survived == (_zone_losses(snap, after, {master}) == 0)


def test_every_master_of_a_random_drain_is_handed_off_the_drained_nodes() -> None:
    for seed in range(10):
        snap = _random_placement(100 + seed)
        drained = [n.name for n in snap.nodes if n.zone == "zone-a"]
        plan = plan_maintenance(snap, Policy(), drained, _healthy(snap))
        on = {m.key for m in snap.members if m.pod.node_name in drained}
        for h in plan.handovers:
            assert h.successor is not None and h.successor.pod not in on
        handed = Counter(h.pod for h in plan.handovers)
        assert all(count == 1 for count in handed.values())
        masters_on = {m.key for m in snap.members if m.key in on and m.role == Role.MASTER}
        accounted = set(handed) | {line.split()[1] for line in plan.lost if line.startswith("m")}
        lost_shards = defaultdict(list)
        for line in plan.lost:
            if line.startswith("shard "):
                lost_shards[line.split()[1]].append(line)
        for key in masters_on - accounted:
            shard = next(m.shard_key for m in snap.members if m.key == key)
            assert shard in lost_shards, (key, plan.lost)


def test_candidates_are_checked_exhaustively_on_tiny_shards() -> None:
    """Brute force over every role assignment of one shard of three: the chosen successor is
    one of the assignments with the fewest zone losses."""
    snap = five_shards()
    masters = {m.key for m in snap.members if m.role == Role.MASTER}
    member = next(m for m in snap.members if m.key == "default/s0-0")
    others = [m.key for m in snap.shards[member.shard_key] if m.key != member.key]
    best = min(
        _zone_losses(snap, (masters - {member.key}) | {c}, {member.key})
        for c in itertools.chain(others)
    )
    chosen = choose_successor(snap, Policy(), member, (), _healthy(snap))
    assert chosen is not None
    assert _zone_losses(snap, (masters - {member.key}) | {chosen.pod}, {member.key}) == best


def test_a_replica_waits_while_its_master_hands_over_to_it() -> None:
    """Two StatefulSets rolled at once ask for a master and its replica together: the replica
    stays until the master's role is handed over."""
    snap = five_shards()
    health = _healthy(snap)
    waiting = judge_disruption(
        snap, Policy(), "default/s1-1", health, handing_over={"default/s1-0"}
    )
    assert waiting.kind == "wait" and "handing shard default/cache/s1 over" in waiting.reason
    assert judge_disruption(snap, Policy(), "default/s1-1", health).kind == "allow"


def test_a_master_whose_only_replica_is_to_stop_too_lets_it_go_first() -> None:
    """Two StatefulSets rolled at once ask for a master and its only replica together: the
    master does not hand its role to a pod about to stop (it would hand it back at that pod's
    stop, and again, until a hold ran out); the replica goes first."""
    snap = five_shards()
    health = _healthy(snap)
    master = judge_disruption(snap, Policy(), "default/s1-0", health, asked={"default/s1-1"})
    assert master.kind == "wait" and master.first == "default/s1-1"
    assert "default/s1-1 of shard default/cache/s1 is to stop too: it goes first" in master.reason
    assert judge_disruption(
        snap, Policy(), "default/s1-1", health, asked={"default/s1-0"}
    ).kind == ("allow")


def test_a_master_hands_over_to_a_replica_that_stays_before_waiting_for_one_that_goes() -> None:
    snap = five_shards()
    verdict = judge_disruption(
        snap, Policy(), "default/s0-0", _healthy(snap), asked={"default/s0-2"}
    )
    assert verdict.kind == "handover" and verdict.first is None
    assert verdict.successor is not None and verdict.successor.pod == "default/s0-1"


def test_a_master_waits_while_redis_would_hold_its_only_successors_election() -> None:
    """A replica that stood for election lately cannot stand again for 4 x cluster-node-timeout:
    sent CLUSTER FAILOVER meanwhile, it pauses its master's writes until then. The master waits,
    serving, and says why; a replica Redis lets stand is taken instead."""
    snap = five_shards()
    health = _healthy(snap)
    why = "default/s1-1 stood for election at 10:00:00Z; Redis lets it stand again 20s after"
    held = judge_disruption(
        snap, Policy(), "default/s1-0", health, cannot_stand={"default/s1-1": why}
    )
    assert held.kind == "wait" and held.reason == f"shard default/cache/s1: {why}"
    other = judge_disruption(
        snap, Policy(), "default/s0-0", health, cannot_stand={"default/s0-2": why}
    )
    assert other.kind == "handover"
    assert other.successor is not None and other.successor.pod == "default/s0-1"
    replaced = "default/s0-0 was failed over at 10:00:00Z; Redis's masters vote about it again"
    voted = judge_disruption(
        snap, Policy(), "default/s0-0", health, no_votes={"default/s0-0": replaced}
    )
    assert voted.kind == "wait" and replaced in voted.reason
    # a master replaced lately may itself take the role back: its replica's votes are free
    back = judge_disruption(
        snap, Policy(), "default/s1-0", health, no_votes={"default/s1-1": replaced}
    )
    assert back.kind == "handover"
