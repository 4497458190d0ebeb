"""stability (soft, rebalance only): each move and each failover costs its weight.

A running member that stays in its node's class is kept on that very node by solver/assign.py.
"""

from models.cluster import Role
from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule


def encode(pm: PlacementModel) -> None:
    problem = pm.problem
    if problem.mode != "rebalance":
        return
    weights = problem.policy.weights
    for group in problem.groups:
        if group.origin_node is None:
            continue
        stay = sum(
            pm.group_vars(group, [group.origin_class] if group.origin_class is not None else []), 0
        )
        pm.add_cost("move", weights.move, 1 - stay)
    for shard in problem.shards.values():
        current = shard.current_master
        if current is None:
            continue
        group = next(
            (
                pm.problem.groups[g]
                for g in shard.groups
                if any(m.key == current.key for m in pm.problem.groups[g].members)
            ),
            None,
        )
        if group is None:
            continue
        still_master = sum(pm.group_vars(group, role=Role.MASTER), 0)
        pm.add_cost("failover", weights.failover, 1 - still_master)


RULE = Rule(
    name="stability",
    kind="soft",
    doc="Rebalance only: each pod moved costs weights.move, each failover weights.failover.",
    encode=encode,
    check=lambda *_: [],
)
