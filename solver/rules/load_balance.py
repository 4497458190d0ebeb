"""load-balance (soft): memory requests spread evenly.

Cost = weight x the highest memory utilisation (percent, floored) among nodes that host a managed
member. A class's average is a lower bound on its fullest node, and solver/assign.py spreads
members evenly inside a class, so the two stay close.
"""

from solver.classes.cpmodel import PlacementModel
from solver.rules.base import Rule

MEMORY = 1


def encode(pm: PlacementModel) -> None:
    weight = pm.problem.policy.weights.load_balance
    if not weight:
        return
    problem = pm.problem
    m = pm.model
    top = m.new_int_var(0, 10_000, "maxMemoryUtilisation")
    in_class = set(problem.node_class)
    hosting = {n.name for _, n in problem.fixed_members if n is not None}
    # Bounds that no decision moves (running members' nodes that take nothing new) fold into one
    # constant floor: a large running cluster would otherwise add thousands of constraints.
    floor = 0
    for node in problem.snapshot.nodes:
        if node.name in hosting and node.name not in in_class and node.allocatable.memory > 0:
            load = problem.pod_load.get(node.name)
            used = load.memory if load else 0
            floor = max(floor, (100 * used) // node.allocatable.memory)
    for cls in problem.classes:
        alloc = cls.alloc[MEMORY] * cls.size
        if alloc <= 0:
            continue
        demand = pm.class_count(cls.index, weight=MEMORY)
        class_load = cls.size * cls.used[MEMORY] + demand
        if cls.fixed_members:
            if isinstance(demand, int):
                # (top + 1) * alloc >= 100 * load + 1, with the load fixed
                floor = max(floor, -(-(100 * class_load + 1) // alloc) - 1)
            else:
                m.add((top + 1) * alloc >= 100 * class_load + 1)
            continue
        if isinstance(demand, int):
            continue
        hosts = m.new_bool_var(f"hosts[{cls.index}]")
        for g, _, v in pm.by_class[cls.index]:
            m.add(v <= min(g.size, cls.size) * hosts)
        m.add((top + 1) * alloc >= 100 * class_load + 1).only_enforce_if(hosts)
    if floor:
        m.add(top >= floor)
    pm.add_cost("loadBalance", weight, top)


RULE = Rule(
    name="load-balance",
    kind="soft",
    doc="Memory requests spread evenly (weights.loadBalance x the fullest node's utilisation).",
    encode=encode,
    check=lambda *_: [],
)
