"""Rebalance's repair picks a replica's new node by scanning the roomiest nodes first and
stopping early (solver/repair.py ``_destination``): the node it picks is the one a scan of every
node picks, on careless random clusters, with required separation or without, as moves change
the nodes' free room."""

import random

import pytest

from models.cluster import Member, Node
from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.synthetic import generate_cluster, redis_pod
from models.synthetic import node as node_object
from solver.predicates import blocking_reason, node_accepts_new_pods
from solver.repair import Caps, _State


def _every_node(state: _State, shard: str, member: Member) -> Node | None:
    """The plain way: judge every node, keep the least (zone, rack, -free memory, name)."""
    master = state.nodes.get(state.node[state.master[shard]])
    hosts = {
        state.nodes[state.node[m.key]].host
        for m in state.members[shard]
        if m is not member and state.node[m.key] in state.nodes
    }
    best = None
    for node in state.snapshot.nodes:
        if node.host in hosts or node.name == state.node[member.key]:
            continue
        if not member.pod.requests.fits_in(state.free[node.name]):
            continue
        if master is not None and any(
            node.domain(lvl) == master.domain(lvl) for lvl in state.required
        ):
            continue
        if not node_accepts_new_pods(node) or blocking_reason(member.pod, node) is not None:
            continue
        key = (
            int(master is not None and node.zone == master.zone),
            int(master is not None and node.rack == master.rack),
            -state.free[node.name].memory,
            node.name,
        )
        if best is None or key < best[0]:
            best = (key, node)
    return None if best is None else best[1]


@pytest.mark.parametrize("seed", range(12))
def test_the_early_stop_picks_what_a_scan_of_every_node_picks(seed: int) -> None:
    rng = random.Random(seed)
    policy = Policy()
    if seed % 2:
        rules = policy.rules.model_copy(
            update={
                "replica_separation": policy.rules.replica_separation.model_copy(
                    update={"rack": "required"}
                )
            }
        )
        policy = policy.model_copy(update={"rules": rules})
    document = generate_cluster(
        rng.randint(12, 60), 0, running_shards=rng.randint(8, 40), seed=seed, busy_fraction=0.5
    )
    snapshot = build_snapshot(flatten([document]), policy)
    state = _State(snapshot, policy, None)
    state.failovers(None, {})
    compared = 0
    for shard in sorted(state.members):
        for member in state.members[shard]:
            if member.key == state.master[shard]:
                continue
            expected = _every_node(state, shard, member)
            found, _ = state._destination(shard, member, False)
            assert found == expected, (shard, member.key)
            compared += 1
            if found is not None and rng.random() < 0.5:
                state._move(member, found)  # the free room changes: the order must follow
    assert compared > 0
    assert state.by_room == sorted((-room.memory, name) for name, room in state.free.items())


def test_replicas_on_their_masters_host_all_move() -> None:
    """Five shards with a replica on its master's host, three empty nodes in other zones:
    every such replica moves, and to another zone than its master's."""
    items = [
        node_object(f"n{i}", f"zone-{'aabbc'[i]}", f"rack-{i}", "32", "128Gi") for i in range(5)
    ]
    items += [
        node_object(f"e{i}", f"zone-{'bcc'[i]}", f"rack-e{i}", "32", "128Gi") for i in range(3)
    ]
    for s in range(5):
        items.append(redis_pod(f"r-{s}-0", "redis", str(s), "master", "1", "4Gi", f"n{s}"))
        items.append(redis_pod(f"r-{s}-1", "redis", str(s), "replica", "1", "4Gi", f"n{s}"))
    policy = Policy()
    snapshot = build_snapshot(
        flatten([{"apiVersion": "v1", "kind": "List", "items": items}]), policy
    )
    state = _State(snapshot, policy, None)
    at_fault = [m for s in sorted(state.members) for m in state._replicas_at_fault(s)]
    why: dict[str, str] = {}
    state.moves(Caps(), float("inf"), why)
    assert len(at_fault) == 5 and not why
    for m in at_fault:
        master = state.nodes[state.node[state.master[m.shard_key]]]
        assert m.key in state.moved and state.nodes[state.node[m.key]].zone != master.zone
