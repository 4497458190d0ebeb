"""The explanation only explains what happened: a plan that places every pod explains nothing,
and one that leaves a shard out says why for that shard."""

from models.kube_objects import build_snapshot, flatten
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from placer.output import render
from solver.solve import SolveOptions, solve


def _plan(nodes: int, shards: int) -> tuple[Snapshot, Plan]:
    policy = Policy()
    snapshot = build_snapshot(flatten([generate_cluster(nodes, shards, seed=3)]), policy)
    return snapshot, solve(snapshot, policy, "place", SolveOptions(time_limit=5))


def test_a_plan_that_places_every_pod_explains_nothing() -> None:
    snapshot, plan = _plan(12, 4)
    assert not plan.unplaced and len(snapshot.pending) == 12
    assert plan.unplaced_bound == 0  # proven that nothing need stay out: the old trigger
    assert plan.explanation == []
    assert "why:" not in render.plan_table(plan, snapshot)


def test_a_shard_left_out_is_explained() -> None:
    snapshot, plan = _plan(3, 4)  # 4 masters, 3 nodes, at most one master a node
    assert plan.unplaced
    assert all(u.reason for u in plan.unplaced)
    assert "unplaced:" in render.plan_table(plan, snapshot)
