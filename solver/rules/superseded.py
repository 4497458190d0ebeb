"""superseded (soft): members kept off the nodes an upgrade under way replaces next.

superseded = weights.superseded x the members on nodes whose pool already has Ready nodes of a
newer kubelet release (models/maintenance.py). A pod evicted by a node-pool upgrade goes to a
new node of its zone rather than to the old node the upgrade drains next. The weight is below
memberSpread's, so where the zone has no new node yet the pod stays in its zone all the same.
"""

from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule

TERM = "superseded"


def encode(pm: PlacementModel) -> None:
    problem = pm.problem
    weight = problem.policy.weights.superseded
    old = problem.snapshot.superseded
    if not weight or not old:
        return
    fixed = sum(1 for _, node in problem.fixed_members if node is not None and node.name in old)
    pm.add_constant(TERM, weight * fixed)
    for cls in problem.classes:
        if cls.superseded:
            pm.add_cost(TERM, weight, pm.class_count(cls.index))


def _no_hard_violations(*_: object) -> list:
    return []


RULE = Rule(
    name="superseded",
    kind="soft",
    doc="Members kept off nodes a pool upgrade replaces next (weights.superseded).",
    encode=encode,
    check=_no_hard_violations,
)
