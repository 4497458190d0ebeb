"""The stock rules, simulated: their hard parts always hold, their preferences steer as
kube-scheduler's scores do, and on the bundled example one pod at a time loses a zone's master
majority however kube-scheduler's ties would break."""

import random
from collections import Counter

from models.cluster import Node
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.commands.demo import example_path
from placer.inputs.files import snapshot_from_file
from solver.check import check_plan
from solver.stock import stock_plan
from solver.survival import survival_verdicts
from tests.kube_dicts import node, redis_pod, snapshot


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
