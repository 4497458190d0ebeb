"""master-exclusivity (hard): at most maxMastersPerNode masters on a node, all Redis clusters counted."""

from models.cluster import Role
from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule, violations_of


def encode(pm: PlacementModel) -> None:
    cap = pm.problem.policy.rules.max_masters_per_node
    for c, entries in pm.by_class.items():
        masters = [v for _, role, v in entries if role is Role.MASTER]
        if not masters:
            continue
        cls = pm.class_obj(c)
        room = cls.size * max(0, cap - cls.fixed_masters)
        upper = sum(min(g.size, cls.size) for g, role, _ in entries if role is Role.MASTER)
        if upper > room:
            ct = pm.model.add(sum(masters, 0) <= room)
            pm.require(ct, "master-exclusivity", f"{cls.size} node(s) in rack {cls.rack}")


RULE = Rule(
    name="master-exclusivity",
    kind="hard",
    doc="At most rules.maxMastersPerNode masters on one node.",
    encode=encode,
    check=violations_of("master-exclusivity"),
)
